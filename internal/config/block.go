package config

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateCatalogueKeys checks a block's map keyed by catalogue names (its
// zones or images) against the entry's catalogue: every name needs a key
// (need says what it maps to, with an example), and a key the catalogue
// lacks is not supported. The values are the block's to check.
func ValidateCatalogueKeys[V any](path *field.Path, m map[string]V, catalogue []string, need string) field.ErrorList {
	var errs field.ErrorList
	for _, name := range catalogue {
		if _, ok := m[name]; !ok {
			errs = append(errs, field.Required(path.Key(name), need))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(catalogue, k) {
			errs = append(errs, field.NotSupported(path.Key(k), k, catalogue))
		}
	}
	return errs
}

// ValidateBudgets reports the negative ones of a block's budgets, given by
// their field names under path.
func ValidateBudgets(path *field.Path, budgets map[string]*metav1.Duration) field.ErrorList {
	var errs field.ErrorList
	for _, name := range slices.Sorted(maps.Keys(budgets)) {
		if d := budgets[name]; d != nil && d.Duration < 0 {
			errs = append(errs, field.Invalid(path.Child(name), d.Duration.String(), "must not be negative"))
		}
	}
	return errs
}
