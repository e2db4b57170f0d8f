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

package storage

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	featuresapi "k8s.io/kubernetes/pkg/apis/features"
	"k8s.io/kubernetes/pkg/printers"
	printersinternal "k8s.io/kubernetes/pkg/printers/internalversion"
	printerstorage "k8s.io/kubernetes/pkg/printers/storage"
	"k8s.io/kubernetes/pkg/registry/features/feature"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// REST implements a RESTStorage for Features.
type REST struct {
	*genericregistry.Store
}

// NewREST returns the storage of Features and of their status and uses subresources.
func NewREST(optsGetter generic.RESTOptionsGetter) (*REST, *SubresourceREST, *SubresourceREST, error) {
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &featuresapi.Feature{} },
		NewListFunc:               func() runtime.Object { return &featuresapi.FeatureList{} },
		DefaultQualifiedResource:  featuresapi.Resource("features"),
		SingularQualifiedResource: featuresapi.Resource("feature"),

		CreateStrategy:      feature.Strategy,
		UpdateStrategy:      feature.Strategy,
		DeleteStrategy:      feature.Strategy,
		ResetFieldsStrategy: feature.Strategy,

		TableConvertor: printerstorage.TableConvertor{TableGenerator: printers.NewTableGenerator().With(printersinternal.AddHandlers)},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter}); err != nil {
		return nil, nil, nil, err
	}

	statusStore := *store
	statusStore.UpdateStrategy = feature.StatusStrategy
	statusStore.ResetFieldsStrategy = feature.StatusStrategy

	usesStore := *store
	usesStore.UpdateStrategy = feature.UsesStrategy
	usesStore.ResetFieldsStrategy = feature.UsesStrategy

	return &REST{store}, &SubresourceREST{store: &statusStore}, &SubresourceREST{store: &usesStore}, nil
}

// SubresourceREST is the storage of a subresource that updates a part of a
// Feature: its status, or its uses.
type SubresourceREST struct {
	store *genericregistry.Store
}

var _ = rest.Patcher(&SubresourceREST{})

// New creates a new Feature object.
func (r *SubresourceREST) New() runtime.Object {
	return &featuresapi.Feature{}
}

// Destroy cleans up resources on shutdown.
func (r *SubresourceREST) Destroy() {
	// The store is shared with REST, which destroys it.
}

// Get retrieves the object from the storage. It is required to support Patch.
func (r *SubresourceREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update alters the subresource's part of the object.
func (r *SubresourceREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Subresources never create on update.
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields implements rest.ResetFieldsStrategy.
func (r *SubresourceREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints the object like the main resource does.
func (r *SubresourceREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
