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

// Command series materializes the upstream trees from the pinned modules, the overlay
// files and the patch series, saves tree edits back, and exports the series.
//
//	series tree                 build or update _output/kubernetes and _output/autoscaler
//	series save [-group G] [UPSTREAM...]  write tree edits back into patches/ and the overlay files
//	series verify-saved         fail when a tree holds edits that are not saved
//	series patches [-o DIR] [-owner @H]  export each group as format-patch files and its pull request text
//	series roundtrip            prove the export applies to pristine upstream and gives the tree
//	series check                pins, overlay claims and gofmt of the overlay
//	series version              the version string of the kubernetes build
//	series gates UPSTREAM       the feature gates the series adds, one a line
//	series collisions           the names (proto numbers, priorities, gates, groups, metrics) the series and upstream both take
//	series pin -k8s V [-vpa V]  move the pins and the series to another upstream release
//	series pin [-abort]         go on with the port after a conflict is fixed, or undo it
//	series release -k8s V -o DIR  pristine Kubernetes at a release go.mod does not pin
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kube-carry/kube-carry/hack/internal/series"
)

const usage = `usage: series <command> [flags]

commands:
  tree [UPSTREAM...]       build or update the trees under _output/ (kubernetes, autoscaler)
  save [-group G] [UPSTREAM...]  write tree edits back into the repository (all trees by default)
  verify-saved             exit 1 when a tree holds edits that are not saved
  patches [-o DIR] [-owner @HANDLE]  export each group's patches and PR text (default _output/patches)
  roundtrip                check that the export applies to pristine upstream and yields the tree
  check                    check pins, overlay claims and the gofmt of overlay files
  touched UPSTREAM         list the Go packages the series changes
  version                  print the kubernetes version string (v1.X.Y-carry.N+COMMIT)
  gates UPSTREAM           list the feature gates the series adds to UPSTREAM, one a line
  collisions [UPSTREAM...] fail when the series takes a field number, priority, gate, group or metric its upstream takes
  pin -k8s V [-vpa V]      pin another upstream release and move the series onto it (three-way merge)
  pin [-abort]             go on with a port that stopped at a conflict, or go back from it
  release -k8s V -o DIR    materialize pristine Kubernetes V (its zips in go.sum or hack/pins/releases.sum) in DIR
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	root, err := repoRoot()
	if err == nil {
		err = run(root, os.Args[1], os.Args[2:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// repoRoot finds this repository's root from the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "patches")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				return d, nil
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("run this from the kube-carry repository (no go.mod and patches/ above %s)", dir)
		}
	}
}

func run(root, cmd string, args []string) error {
	repo := series.Repo{Root: root}
	pins, err := series.ReadPins(root)
	if err != nil {
		return err
	}
	trees := func(names []string) ([]*series.Tree, error) {
		var out []*series.Tree
		for _, u := range series.Upstreams {
			if len(names) > 0 && !contains(names, u.Name) {
				continue
			}
			out = append(out, &series.Tree{Repo: repo, Up: u, Src: series.GoSource{Root: root}, Pins: pins.For(u), Log: os.Stderr})
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("no upstream named %s (known: kubernetes, autoscaler)", strings.Join(names, ", "))
		}
		return out, nil
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	switch cmd {
	case "tree":
		if err := pins.Check(); err != nil {
			return err
		}
		ts, err := trees(args)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if _, err := t.Sync(); err != nil {
				return err
			}
		}
		return nil

	case "save":
		group := fs.String("group", "", "the group that takes edits to paths no group touches yet (or all edits)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		owner := ""
		if *group != "" {
			for _, u := range series.Upstreams {
				groups, err := repo.Groups(u)
				if err != nil {
					return err
				}
				if _, err := series.FindGroup(groups, *group); err == nil {
					owner = u.Name
				}
			}
			if owner == "" {
				return fmt.Errorf("no group %q under patches/*/ (a new group starts as a directory with a HEADER file; run 'make tree' after creating it)", *group)
			}
		}
		ts, err := trees(fs.Args())
		if err != nil {
			return err
		}
		for _, t := range ts {
			if st, err := t.LoadState(); err != nil || st == nil {
				continue
			}
			into := ""
			if t.Up.Name == owner {
				into = *group
			}
			saved, err := t.Save(into)
			if err != nil {
				return fmt.Errorf("%s: %w", t.Up.Name, err)
			}
			if len(saved) > 0 {
				fmt.Printf("%s: saved edits into %s\n", t.Up.Name, strings.Join(saved, ", "))
			}
		}
		return nil

	case "verify-saved":
		ts, err := trees(nil)
		if err != nil {
			return err
		}
		var errs []error
		for _, t := range ts {
			st, err := t.LoadState()
			if err != nil {
				return err
			}
			if st != nil {
				errs = append(errs, t.Unsaved(st))
			}
		}
		return errors.Join(errs...)

	case "patches":
		out := fs.String("o", filepath.Join(root, "_output", "patches"), "output directory")
		owner := fs.String("owner", "", "GitHub handles of the submitter, for the feature gates' owner comments (@alice)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		ts, err := trees(nil)
		if err != nil {
			return err
		}
		var placeholders []string
		for _, t := range ts {
			ex, err := t.Export(filepath.Join(*out, t.Up.Name), series.ExportOptions{Owner: *owner})
			if err != nil {
				return fmt.Errorf("%s: %w", t.Up.Name, err)
			}
			for _, g := range ex.Groups {
				rel, _ := filepath.Rel(root, g.Dir)
				fmt.Printf("%s: %s/: PR.md and %d patch file(s)\n", t.Up.Name, rel, len(g.Patches))
			}
			for _, p := range ex.Placeholders {
				placeholders = append(placeholders, t.Up.Name+": "+p)
			}
		}
		if len(placeholders) > 0 {
			fmt.Fprintf(os.Stderr, "warning: these feature gates' owner comments still name the placeholder; not for upstream:\n  %s\n"+
				"Export with your GitHub handle to submit: make patches OWNER=@you\n", strings.Join(placeholders, "\n  "))
		}
		return nil

	case "roundtrip":
		ts, err := trees(nil)
		if err != nil {
			return err
		}
		for _, t := range ts {
			work, err := os.MkdirTemp("", "kube-carry-roundtrip-")
			if err != nil {
				return err
			}
			inSync, err := t.RoundTrip(work)
			os.RemoveAll(work)
			if err != nil {
				return fmt.Errorf("%s: %w", t.Up.Name, err)
			}
			what := "the materialized tree"
			if !inSync {
				what = "the series' tree (the materialized tree is not built from the current patches/, so it was not compared: run make tree)"
			}
			fmt.Printf("%s: the exported series applies to pristine upstream and yields %s\n", t.Up.Name, what)
		}
		return nil

	case "check":
		if err := pins.Check(); err != nil {
			return err
		}
		var gofiles []string
		for _, u := range series.Upstreams {
			groups, err := repo.Groups(u)
			if err != nil {
				return err
			}
			for _, g := range groups {
				if err := g.CheckNoBinaries(); err != nil {
					return err
				}
			}
			files, err := repo.OverlayFiles(u)
			if err != nil {
				return err
			}
			for _, f := range files {
				if strings.HasSuffix(f, ".go") {
					gofiles = append(gofiles, f)
				}
			}
		}
		if len(gofiles) == 0 {
			return nil
		}
		c := exec.Command("gofmt", append([]string{"-l"}, gofiles...)...)
		c.Dir = root
		out, err := c.CombinedOutput()
		if err != nil {
			return fmt.Errorf("gofmt: %v: %s", err, out)
		}
		if len(out) > 0 {
			return fmt.Errorf("these overlay files are not gofmt-ed (run gofmt -w on them):\n%s", out)
		}
		return nil

	case "touched":
		ts, err := trees(args)
		if err != nil || len(ts) != 1 {
			return fmt.Errorf("name one upstream: series touched kubernetes|autoscaler")
		}
		st, err := ts[0].LoadState()
		if err != nil || st == nil {
			return fmt.Errorf("no tree for %s; run 'make tree' first", ts[0].Up.Name)
		}
		dirs, err := ts[0].TouchedPackages(st)
		if err != nil {
			return err
		}
		for _, d := range dirs {
			fmt.Println(d)
		}
		return nil

	case "gates":
		ts, err := trees(args)
		if err != nil || len(ts) != 1 {
			return fmt.Errorf("name one upstream: series gates kubernetes|autoscaler")
		}
		gates, err := repo.Gates(ts[0].Up)
		if err != nil {
			return err
		}
		for _, g := range gates {
			fmt.Println(g)
		}
		return nil

	case "release":
		k8s := fs.String("k8s", "", "the Kubernetes release, v1.X.Y")
		dir := fs.String("o", "", "the folder of the tree")
		if err := fs.Parse(args); err != nil {
			return err
		}
		if *k8s == "" || *dir == "" || fs.NArg() > 0 {
			return fmt.Errorf("usage: series release -k8s v1.X.Y -o DIR")
		}
		return series.MaterializeRelease(root, *k8s, *dir, os.Stderr)

	case "version":
		ts, err := trees([]string{"kubernetes"})
		if err != nil {
			return err
		}
		v, err := ts[0].BuildVersion()
		if err != nil {
			return err
		}
		fmt.Println(v)
		return nil

	case "collisions":
		ts, err := trees(args)
		if err != nil {
			return err
		}
		var errs []error
		for _, t := range ts {
			cs, err := t.Collisions()
			if err != nil {
				return err
			}
			if len(cs) > 0 {
				var b strings.Builder
				fmt.Fprintf(&b, "%s: the series takes names its upstream takes too; choose others (docs/development.md, 'Names upstream hands out'):", t.Up.Name)
				for _, c := range cs {
					fmt.Fprintf(&b, "\n  %s", c)
				}
				errs = append(errs, errors.New(b.String()))
			}
		}
		return errors.Join(errs...)

	case "pin":
		k8s := fs.String("k8s", "", "Kubernetes release, e.g. v1.36.4")
		vpa := fs.String("vpa", "", "Vertical Pod Autoscaler release, e.g. v1.8.2")
		abort := fs.Bool("abort", false, "go back to the pins and series from before the port in progress")
		if err := fs.Parse(args); err != nil {
			return err
		}
		ts, err := trees(nil)
		if err != nil {
			return err
		}
		return pin(root, ts, *k8s, *vpa, *abort, func() ([]*series.Tree, error) {
			p, err := series.ReadPins(root)
			if err != nil {
				return nil, err
			}
			pins = p
			return trees(nil)
		})

	default:
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// pin moves the pins and then each tree's series onto the new base (series.StartPort);
// with a port in progress, it goes on with it or, with abort, undoes it.
func pin(root string, ts []*series.Tree, k8s, vpa string, abort bool, reload func() ([]*series.Tree, error)) error {
	backup := series.Backup{Dir: filepath.Join(root, "_output", "port-backup")}
	var moving []*series.Tree
	for _, t := range ts {
		if p, err := t.LoadPort(); err != nil {
			return err
		} else if p != nil {
			moving = append(moving, t)
		}
	}
	_, backedUp := os.Stat(backup.Dir)
	inProgress := len(moving) > 0 || backedUp == nil
	switch {
	case abort && !inProgress:
		return errors.New("no port in progress")
	case abort:
		for _, t := range moving {
			if err := t.AbortPort(); err != nil {
				return err
			}
		}
		if err := backup.Restore(root); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "the pins, the patches and the trees are back as they were before the port")
		return nil
	case inProgress && (k8s != "" || vpa != ""):
		return errors.New("a port is in progress: finish it with 'make pin' or go back with 'make pin ABORT=1'")
	case !inProgress:
		if k8s == "" && vpa == "" {
			return errors.New("name a release: -k8s v1.X.Y and/or -vpa vX.Y.Z")
		}
		// The old series, built and saved, is what the port moves.
		for _, t := range ts {
			if _, err := t.Sync(); err != nil {
				return err
			}
		}
		for _, f := range []string{"go.mod", "go.sum", filepath.Join("hack", "pins", "pins.go")} {
			if err := backup.Save(root, f); err != nil {
				return err
			}
		}
		if err := series.Pin(root, k8s, vpa, os.Stderr); err != nil {
			return errors.Join(err, backup.Restore(root))
		}
	}
	ts, err := reload()
	if err != nil {
		return err
	}
	for _, t := range ts {
		p, err := t.LoadPort()
		if err != nil {
			return err
		}
		if p != nil {
			err = t.ContinuePort(backup)
		} else if needs, nerr := t.NeedsPort(); nerr != nil {
			err = nerr
		} else if needs {
			err = t.StartPort(backup)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", t.Up.Name, err)
		}
	}
	return os.RemoveAll(backup.Dir)
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}
