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

package nodescope

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	vpa_clientset "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned"
)

// apiServer serves the slices as an API server would, with listErr and
// watchErr as the answers to a list and a watch when they are not nil: NotFound
// without the slice CRD, Forbidden without RBAC for it. A watch without error
// ends at once.
func apiServer(t *testing.T, listErr, watchErr *apierrors.StatusError) *vpa_clientset.Clientset {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		answer := listErr
		if r.URL.Query().Get("watch") == "true" {
			answer = watchErr
		}
		if answer != nil {
			w.WriteHeader(int(answer.ErrStatus.Code))
			_ = json.NewEncoder(w).Encode(answer.ErrStatus)
			return
		}
		if r.URL.Query().Get("watch") != "true" {
			_, _ = w.Write([]byte(`{"kind":"VerticalPodAutoscalerSliceList","apiVersion":"autoscaling.k8s.io/v1alpha1","metadata":{"resourceVersion":"1"},"items":[]}`))
		}
	}))
	t.Cleanup(srv.Close)
	client, err := vpa_clientset.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// TestNewLookupFailsWithoutSliceAccess: without the slice CRD or the
// permission to list or watch the slices, NewLookup returns at once with an
// error that names what is missing, where it waited for a cache that never
// syncs.
func TestNewLookupFailsWithoutSliceAccess(t *testing.T) {
	slices := schema.GroupResource{Group: "autoscaling.k8s.io", Resource: "verticalpodautoscalerslices"}
	for _, tc := range []struct {
		name              string
		namespace         string
		listErr, watchErr *apierrors.StatusError
		wantErr           []string // substrings of the error; none: no error
	}{
		{name: "no CRD", listErr: apierrors.NewNotFound(slices, ""), watchErr: apierrors.NewNotFound(slices, ""),
			wantErr: []string{"does not serve verticalpodautoscalerslices.autoscaling.k8s.io", "CustomResourceDefinition"}},
		{name: "no list RBAC", listErr: apierrors.NewForbidden(slices, "", nil), watchErr: apierrors.NewForbidden(slices, "", nil),
			wantErr: []string{"may not list verticalpodautoscalerslices.autoscaling.k8s.io in all namespaces", "deploy/vpa-rbac.yaml"}},
		{name: "no watch RBAC in the namespace", namespace: "ns", watchErr: apierrors.NewForbidden(slices, "", nil),
			wantErr: []string{"may not watch verticalpodautoscalerslices.autoscaling.k8s.io in namespace ns"}},
		{name: "access", namespace: "ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stopCh := make(chan struct{})
			defer close(stopCh)
			type result struct {
				lookup *Lookup
				err    error
			}
			done := make(chan result, 1)
			go func() {
				lookup, err := NewLookup(apiServer(t, tc.listErr, tc.watchErr), tc.namespace, stopCh)
				done <- result{lookup, err}
			}()
			var got result
			select {
			case got = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("NewLookup did not return within 10s")
			}
			if len(tc.wantErr) == 0 {
				if got.err != nil || got.lookup == nil {
					t.Errorf("NewLookup: %v, %v; want a Lookup", got.lookup, got.err)
				}
				return
			}
			if got.err == nil {
				t.Fatal("NewLookup: no error")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(got.err.Error(), want) {
					t.Errorf("error %q does not say %q", got.err, want)
				}
			}
		})
	}
}

// TestNewLookupRetriesAnUnreachableAPIServer: an API server that answers with
// errors that name nothing missing (here 503) is asked again until the check's
// deadline; then NewLookup fails with the last error instead of waiting for a
// cache sync without end.
func TestNewLookupRetriesAnUnreachableAPIServer(t *testing.T) {
	defer func(timeout time.Duration) { accessCheckTimeout = timeout }(accessCheckTimeout)
	accessCheckTimeout = 3 * time.Second
	for _, tc := range []struct {
		name     string
		failures int32 // answers of 503 before the server serves the slices
		wantErr  string
	}{
		{name: "reachable after two tries", failures: 2},
		{name: "never reachable", failures: 1 << 30, wantErr: "verticalpodautoscalerslices.autoscaling.k8s.io could not be read within 3s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) <= tc.failures {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				if r.URL.Query().Get("watch") != "true" {
					_, _ = w.Write([]byte(`{"kind":"VerticalPodAutoscalerSliceList","apiVersion":"autoscaling.k8s.io/v1alpha1","metadata":{"resourceVersion":"1"},"items":[]}`))
				}
			}))
			t.Cleanup(srv.Close)
			client, err := vpa_clientset.NewForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			stopCh := make(chan struct{})
			defer close(stopCh)
			lookup, err := NewLookup(client, "ns", stopCh)
			if tc.wantErr == "" {
				if err != nil || lookup == nil {
					t.Errorf("NewLookup: %v, %v; want a Lookup", lookup, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NewLookup: %v; want an error saying %q", err, tc.wantErr)
			}
		})
	}
}
