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

package tasks

import (
	"context"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"
	"k8s.io/kubernetes/pkg/controlplane/controller/featurelifecycle"
)

// ClearPVCUnusedCondition turns PersistentVolumeClaimUnusedSinceTime off
// cleanly. With the feature on, kube-controller-manager keeps an Unused
// condition on every PersistentVolumeClaim and its lastTransitionTime says
// since when no pod uses the claim. Off, nothing maintains it: a claim that a
// pod starts using keeps saying Unused since last month, and a cleanup job
// that trusts it deletes a claim in use. The task removes the condition from
// every claim once WaitForUses has shown that no kube-controller-manager
// writes it any more.
type ClearPVCUnusedCondition struct{}

var _ featurelifecycle.Exercise = ClearPVCUnusedCondition{}

func (ClearPVCUnusedCondition) Name() string { return "ClearPVCUnusedCondition" }

func (ClearPVCUnusedCondition) AppliesTo(t featurelifecycle.Transition) bool {
	return t == featurelifecycle.TurnOff
}

// Run removes the condition from every claim that has it, through the
// status subresource and guarded by the claim's resourceVersion, so a claim
// changed meanwhile is left for the next run. It is done after a run that
// found no claim with the condition.
func (ClearPVCUnusedCondition) Run(ctx context.Context, tc *featurelifecycle.TaskContext) (featurelifecycle.Result, error) {
	claims := tc.Client.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll)
	var found, cleared int
	err := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return claims.List(ctx, opts)
	}).EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		claim := obj.(*v1.PersistentVolumeClaim)
		i := unusedCondition(claim)
		if i < 0 {
			return nil
		}
		found++
		// Only for the transition this run is for: the feature may have been
		// turned back on, and kube-controller-manager maintains the condition again.
		if err := tc.Fence(ctx); err != nil {
			return err
		}
		claim = claim.DeepCopy()
		claim.Status.Conditions = slices.Delete(claim.Status.Conditions, i, i+1)
		_, err := tc.Client.CoreV1().PersistentVolumeClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
		switch {
		case err == nil:
			cleared++
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		default:
			return fmt.Errorf("clearing the Unused condition of %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		return nil
	})
	if err != nil {
		return featurelifecycle.Result{}, err
	}
	if found > 0 {
		return featurelifecycle.NotYet(fmt.Sprintf("cleared the Unused condition of %d of %d PersistentVolumeClaims", cleared, found)), nil
	}
	return featurelifecycle.Done, nil
}

func unusedCondition(claim *v1.PersistentVolumeClaim) int {
	return slices.IndexFunc(claim.Status.Conditions, func(c v1.PersistentVolumeClaimCondition) bool {
		return c.Type == v1.PersistentVolumeClaimUnused
	})
}

const harnessNamespace = "feature-lifecycle-harness"

// Use creates a claim with the Unused condition, as kube-controller-manager
// sets it on a claim no pod uses.
func (ClearPVCUnusedCondition) Use(ctx context.Context, client kubernetes.Interface) error {
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harnessNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	claim, err := client.CoreV1().PersistentVolumeClaims(harnessNamespace).Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "unused-claim"},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	claim.Status.Conditions = append(claim.Status.Conditions, v1.PersistentVolumeClaimCondition{
		Type: v1.PersistentVolumeClaimUnused, Status: v1.ConditionTrue, LastTransitionTime: metav1.Now(),
	})
	claim, err = client.CoreV1().PersistentVolumeClaims(harnessNamespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	if err == nil && unusedCondition(claim) < 0 {
		err = errors.New("the server dropped the Unused condition of a claim while PersistentVolumeClaimUnusedSinceTime is on")
	}
	return err
}

// Release does nothing: the task cleans up by itself.
func (ClearPVCUnusedCondition) Release(context.Context, kubernetes.Interface) error { return nil }

// Pristine fails while a claim has the Unused condition.
func (ClearPVCUnusedCondition) Pristine(ctx context.Context, client kubernetes.Interface) error {
	claims, err := client.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, claim := range claims.Items {
		if unusedCondition(&claim) >= 0 {
			return fmt.Errorf("PersistentVolumeClaim %s/%s still has the Unused condition", claim.Namespace, claim.Name)
		}
	}
	return nil
}
