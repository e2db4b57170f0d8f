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
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	vpa_types "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpa_alpha "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1alpha1"
	vpa_fake "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned/fake"
)

// asAPIServer makes the fake API server reject a created or updated object
// whose labels or generateName the real one rejects, and generate names as the
// real one does (at most 58 characters of generateName and 5 more). Like the
// real one, the fake rejects a list whose label selector holds an invalid value.
func asAPIServer(client *vpa_fake.Clientset) {
	generated := 0
	client.PrependReactor("create", "*", func(action core.Action) (bool, runtime.Object, error) {
		obj := action.(core.CreateAction).GetObject().(metav1.Object)
		if obj.GetName() == "" {
			generated++
			base := obj.GetGenerateName()
			obj.SetName(fmt.Sprintf("%s%05d", base[:min(len(base), 58)], generated))
		}
		return false, nil, nil
	})
	client.PrependReactor("*", "*", func(action core.Action) (bool, runtime.Object, error) {
		write, ok := action.(interface{ GetObject() runtime.Object })
		if !ok {
			return false, nil, nil
		}
		obj := write.GetObject().(metav1.Object)
		errs := metav1validation.ValidateLabels(obj.GetLabels(), field.NewPath("metadata", "labels"))
		if name := obj.GetGenerateName(); name != "" {
			for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(name, true) {
				errs = append(errs, field.Invalid(field.NewPath("metadata", "generateName"), name, msg))
			}
		}
		if len(errs) > 0 {
			resource := action.GetResource()
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: resource.Group, Kind: resource.Resource}, obj.GetName(), errs)
		}
		return false, nil, nil
	})
}

func TestLongVPANames(t *testing.T) {
	for _, name := range []string{
		strings.Repeat("a", validation.LabelValueMaxLength),
		strings.Repeat("a", validation.LabelValueMaxLength+1),
		strings.Repeat("node-exporter.", 18) + "a", // 253 characters, the most a name may have
	} {
		t.Run(name, func(t *testing.T) {
			vpa := &vpa_types.VerticalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: "uid"}}
			f := newCheckpointFixture()
			asAPIServer(f.client)
			ctx := context.TODO()

			writer := &Writer{Client: f.client.AutoscalingV1alpha1()}
			if _, err := writer.Write(ctx, vpa, nodeRecs(150, 100), Groups{}, nil); err != nil {
				t.Fatalf("first write: %v", err)
			}
			// The second write finds the slices of the first by their label.
			if plan, err := writer.Write(ctx, vpa, nodeRecs(150, 100), Groups{}, nil); err != nil || plan.Writes() != 0 {
				t.Fatalf("second write of the same recommendations: %d writes, %v; want none", plan.Writes(), err)
			}

			h := history([]string{"node-0000", "node-0001"}, 100, f.now)
			h.VPA = vpa
			if _, err := f.store.Load(ctx, vpa, existingNodes); err != nil {
				t.Fatalf("load: %v", err)
			}
			if _, err := f.store.Store(ctx, f.now, []NodeHistory{h}); err != nil {
				t.Fatalf("store: %v", err)
			}
			loaded, err := NewCheckpointStore(f.client.AutoscalingV1alpha1()).Load(ctx, vpa, existingNodes)
			if err != nil || len(loaded) != 2 {
				t.Fatalf("a new store loads %d nodes (%v), want 2", len(loaded), err)
			}

			// Every object holds the full name and a valid label; the cleaner
			// finds them all by it.
			c := &Cleaner{
				Client:           f.client.AutoscalingV1alpha1(),
				Slices:           cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{VPANameIndex: VPANameIndexFunc}),
				CheckpointSlices: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{VPANameIndex: VPANameIndexFunc}),
				MaxDeletes:       100,
			}
			slices, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerSlices("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkpoints, err := f.client.AutoscalingV1alpha1().VerticalPodAutoscalerCheckpointSlices("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			add := func(indexer cache.Indexer, meta metav1.ObjectMeta, vpaName string) {
				if vpaName != name || len(validation.IsValidLabelValue(meta.Labels[vpa_alpha.VPANameLabel])) != 0 {
					t.Errorf("%s: vpaName %q, label %q", meta.Name, vpaName, meta.Labels[vpa_alpha.VPANameLabel])
				}
				if err := indexer.Add(&metav1.PartialObjectMetadata{ObjectMeta: meta}); err != nil {
					t.Fatal(err)
				}
			}
			for _, s := range slices.Items {
				add(c.Slices, s.ObjectMeta, s.VPAName)
			}
			for _, s := range checkpoints.Items {
				add(c.CheckpointSlices, s.ObjectMeta, s.VPAName)
			}
			if len(slices.Items) != 2 || len(checkpoints.Items) != 1 {
				t.Errorf("%d slices and %d checkpoint slices, want 2 and 1", len(slices.Items), len(checkpoints.Items))
			}
			// The checkpoint slice is marked, to go after the grace period.
			if stats, err := c.Cleanup(ctx, []*vpa_types.VerticalPodAutoscaler{vpa}, nil); err != nil || stats != (CleanupStats{Deleted: 2, Marked: 1}) {
				t.Errorf("cleanup: %+v (%v), want the 2 slices deleted and the checkpoint slice marked", stats, err)
			}
		})
	}
}

func TestVPANameLabelValue(t *testing.T) {
	short := "node-exporter"
	if got := vpa_alpha.VPANameLabelValue(short); got != short {
		t.Errorf("label value of %q is %q, want the name itself", short, got)
	}
	prefix := strings.Repeat("node-exporter-", 5)
	long1, long2 := prefix+"one", prefix+"two"
	v1, v2 := vpa_alpha.VPANameLabelValue(long1), vpa_alpha.VPANameLabelValue(long2)
	for _, v := range []string{v1, v2} {
		if msgs := validation.IsValidLabelValue(v); len(msgs) != 0 {
			t.Errorf("label value %q: %v", v, msgs)
		}
	}
	if v1 == v2 || v1 != vpa_alpha.VPANameLabelValue(long1) {
		t.Errorf("label values %q and %q of two long names with the same beginning: want different and stable values", v1, v2)
	}
	// The value begins the slices' names (generateName): a long name cut
	// just after a dot still gives valid names.
	for _, name := range []string{strings.Repeat("a", 51) + "." + strings.Repeat("b", 20), strings.Repeat("a", 30) + "." + strings.Repeat("b", 20) + ".c" + strings.Repeat("d", 20)} {
		v := vpa_alpha.VPANameLabelValue(name)
		if msgs := validation.IsValidLabelValue(v); len(msgs) != 0 {
			t.Errorf("label value %q of %q: %v", v, name, msgs)
		}
		if msgs := validation.IsDNS1123Subdomain(v + "-" + "x7k2q"); len(msgs) != 0 {
			t.Errorf("slice name from label value %q of %q: %v", v, name, msgs)
		}
	}
}
