/*
Copyright The Kubernetes Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package series

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// prTemplates are upstream's .github/PULL_REQUEST_TEMPLATE.md, verbatim: kubernetes/kubernetes
// at v1.36.3 and kubernetes/autoscaler at 0a3e05e5969e (the module zip of the VPA lacks it).
//
//go:embed prtemplate/*.md
var prTemplates embed.FS

// prFile holds what a group's pull request says that its HEADER cannot: the kind,
// issues, extra documentation links and notes for the reviewer.
const prFile = "pr"

// PRInput is a group's pr file: "kind:", "issue:" and "doc:" lines, then, after the
// first blank line, the special notes for the reviewer.
type PRInput struct {
	Kinds  []string
	Issues []string
	Docs   []string
	Notes  string
}

// PRText is what a group's pull request shows, from its HEADER, pr file and export.
type PRText struct {
	Upstream Upstream
	Group    Group
	Input    PRInput
	// Generated is the subject of the group's generated commit and the commands that
	// made it; empty when the group exports as one commit.
	Generated    string
	GeneratedBy  []string
	DocsInThisPR []string // documentation files the group changes by hand
}

func (u Upstream) prTemplate() (string, error) {
	data, err := prTemplates.ReadFile("prtemplate/" + u.PRTemplate)
	return string(data), err
}

var kindLine = regexp.MustCompile(`(?m)^/kind ([a-z-]+)$`)

// ReadPRInput reads and checks a group's pr file against upstream's template.
func ReadPRInput(root string, u Upstream, g Group) (PRInput, error) {
	rel, _ := filepath.Rel(root, filepath.Join(g.Dir, prFile))
	data, err := os.ReadFile(filepath.Join(g.Dir, prFile))
	if errors.Is(err, fs.ErrNotExist) {
		return PRInput{}, fmt.Errorf("%s: missing: every group needs one with its pull request's kind (see patches/README.md)", rel)
	}
	if err != nil {
		return PRInput{}, err
	}
	tmpl, err := u.prTemplate()
	if err != nil {
		return PRInput{}, err
	}
	var known []string
	for _, m := range kindLine.FindAllStringSubmatch(tmpl, -1) {
		known = append(known, m[1])
	}
	var in PRInput
	head, notes, _ := strings.Cut(string(data), "\n\n")
	in.Notes = strings.TrimSpace(notes)
	for i, l := range strings.Split(head, "\n") {
		key, value, ok := strings.Cut(l, ":")
		value = strings.TrimSpace(value)
		if strings.TrimSpace(l) == "" {
			continue
		}
		if !ok || value == "" {
			return PRInput{}, fmt.Errorf("%s:%d: want \"kind:\", \"issue:\" or \"doc:\" and a value before the first blank line, got %q", rel, i+1, l)
		}
		switch strings.TrimSpace(key) {
		case "kind":
			for _, k := range strings.Fields(value) {
				if !slices.Contains(known, k) {
					return PRInput{}, fmt.Errorf("%s:%d: kind %q is not in upstream's template (%s)", rel, i+1, k, strings.Join(known, ", "))
				}
				in.Kinds = append(in.Kinds, k)
			}
		case "issue":
			in.Issues = append(in.Issues, value)
		case "doc":
			in.Docs = append(in.Docs, value)
		default:
			return PRInput{}, fmt.Errorf("%s:%d: unknown field %q (known: kind, issue, doc)", rel, i+1, key)
		}
	}
	if len(in.Kinds) == 0 {
		return PRInput{}, fmt.Errorf("%s: no \"kind:\" line (one or more of %s)", rel, strings.Join(known, ", "))
	}
	return in, nil
}

// headerParts splits a group's commit message into the parts its pull request shows
// in different sections: the release-note block and the "KEP:" lines go apart.
type headerParts struct {
	Subject, Body, ReleaseNote string
	KEPs                       []string
}

func parseHeader(root string, g Group) (headerParts, error) {
	rel, _ := filepath.Rel(root, filepath.Join(g.Dir, headerFile))
	lines := strings.Split(strings.TrimRight(g.Header, "\n"), "\n")
	h := headerParts{Subject: lines[0]}
	var body []string
	note, inNote := []string(nil), false
	found := false
	for _, l := range lines[1:] {
		switch {
		case inNote && strings.TrimSpace(l) == "```":
			inNote = false
		case inNote:
			note = append(note, l)
		case strings.TrimSpace(l) == "```release-note":
			if found {
				return h, fmt.Errorf("%s: more than one ```release-note block", rel)
			}
			inNote, found = true, true
		case strings.HasPrefix(l, "KEP: "):
			h.KEPs = append(h.KEPs, strings.TrimSpace(strings.TrimPrefix(l, "KEP: ")))
		default:
			body = append(body, l)
		}
	}
	switch {
	case !found:
		return h, fmt.Errorf("%s: no ```release-note block; upstream's pull request needs one (write NONE in it when users see no change)", rel)
	case inNote:
		return h, fmt.Errorf("%s: the ```release-note block is not closed with ```", rel)
	}
	h.ReleaseNote = strings.TrimSpace(strings.Join(note, "\n"))
	if h.ReleaseNote == "" {
		return h, fmt.Errorf("%s: the ```release-note block is empty (write NONE when users see no change)", rel)
	}
	h.Body = strings.TrimSpace(regexp.MustCompile(`\n{3,}`).ReplaceAllString(strings.Join(body, "\n"), "\n\n"))
	return h, nil
}

// Render fills upstream's template: the title (the HEADER's subject) on the first
// line, a blank line, then the body, each section of the template filled in and its
// comments dropped.
func (p PRText) Render(root string) (string, error) {
	h, err := parseHeader(root, p.Group)
	if err != nil {
		return "", err
	}
	tmpl, err := p.Upstream.prTemplate()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(h.Subject + "\n")
	for _, sec := range strings.Split("\n"+tmpl, "\n#### ")[1:] {
		heading, _, _ := strings.Cut(sec, "\n")
		content, err := p.section(heading, h)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\n#### %s\n\n", heading)
		if content != "" {
			b.WriteString(content + "\n")
		}
	}
	return b.String(), nil
}

func (p PRText) section(heading string, h headerParts) (string, error) {
	switch {
	case strings.HasPrefix(heading, "Which component"):
		return p.Upstream.Subdir, nil
	case strings.HasPrefix(heading, "What type of PR"):
		return "/kind " + strings.Join(p.Input.Kinds, "\n/kind "), nil
	case strings.HasPrefix(heading, "What this PR does"):
		return h.Body, nil
	case strings.HasPrefix(heading, "Which issue(s)"):
		refs := append([]string(nil), p.Input.Issues...)
		for _, k := range h.KEPs {
			refs = append(refs, "KEP: "+k)
		}
		if len(refs) == 0 {
			return "N/A", nil
		}
		return strings.Join(refs, "\n"), nil
	case strings.HasPrefix(heading, "Special notes"):
		var notes []string
		if p.Input.Notes != "" {
			notes = append(notes, p.Input.Notes)
		}
		if p.Generated != "" {
			notes = append(notes, fmt.Sprintf("The generated files are in a commit of their own, %q:\nwhat upstream's generators make of the first commit, which holds everything\nwritten by hand. To reproduce them:\n\n    %s",
				p.Generated, strings.Join(p.GeneratedBy, "\n    ")))
		}
		return strings.Join(notes, "\n\n"), nil
	case strings.HasPrefix(heading, "Does this PR introduce a user-facing change"):
		return "```release-note\n" + h.ReleaseNote + "\n```", nil
	case strings.HasPrefix(heading, "Additional documentation"):
		var docs []string
		for _, k := range h.KEPs {
			docs = append(docs, "- [KEP]: "+k)
		}
		for _, d := range p.DocsInThisPR {
			docs = append(docs, "- [Usage]: "+d+" (changed in this pull request)")
		}
		docs = append(docs, p.Input.Docs...)
		if len(docs) == 0 {
			return "```docs\n\n```", nil
		}
		return "```docs\n" + strings.Join(docs, "\n") + "\n```", nil
	}
	return "", fmt.Errorf("upstream's pull request template %s has a section this tool does not know: %q", p.Upstream.PRTemplate, heading)
}
