// Package scheme builds the runtime.Scheme lull's binaries and tests share:
// the built-in Kubernetes types, CustomResourceDefinitions and lull's API.
package lullscheme

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// New returns a scheme with the built-in types and lull's.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil { // lull's CRDs: is lull being uninstalled?
		panic(err)
	}
	if err := lullv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}
