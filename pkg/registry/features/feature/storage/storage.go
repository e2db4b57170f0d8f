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
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
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

	return &REST{store}, &SubresourceREST{store: &statusStore, authorize: serverFlowOnly}, &SubresourceREST{store: &usesStore, authorize: ownUsesOnly}, nil
}

// SubresourceREST is the storage of a subresource that updates a part of a
// Feature: its status, or its uses.
type SubresourceREST struct {
	store *genericregistry.Store
	// authorize, if set, is asked about the change an update makes, after the
	// request's authorization and before admission validates it.
	authorize func(ctx context.Context, obj, old *featuresapi.Feature) error
}

// serverFlowOnly lets only kube-apiserver itself (its loopback identity) write
// the status of the Features in kube-system: their state and tasks are the
// server flow's, whatever RBAC grants, and components report through uses.
// Third parties drive the Features in their own namespaces, as RBAC allows.
func serverFlowOnly(ctx context.Context, obj, _ *featuresapi.Feature) error {
	if obj.Namespace != metav1.NamespaceSystem {
		return nil
	}
	if u, ok := genericapirequest.UserFrom(ctx); ok && u.GetName() == user.APIServerUser {
		return nil
	}
	return apierrors.NewForbidden(featuresapi.Resource("features/status"), obj.Name,
		fmt.Errorf("the status of the Features in %s is written by kube-apiserver's feature lifecycle controller only; components report through features/uses", metav1.NamespaceSystem))
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
	if r.authorize != nil {
		validate := updateValidation
		updateValidation = func(ctx context.Context, obj, old runtime.Object) error {
			if err := r.authorize(ctx, obj.(*featuresapi.Feature), old.(*featuresapi.Feature)); err != nil {
				return err
			}
			if validate == nil {
				return nil
			}
			return validate(ctx, obj, old)
		}
	}
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
