package config

import (
	"fmt"
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

// ValidateTrust checks how a block verifies the peer it talks to (an SSH
// host, an API's certificate): by the file at fileField, which need
// describes, or, explicitly and not recommended, not at all (the boolean
// insecure at insecureField). One of the two is required, so that no entry
// skips verification by omission; both are a contradiction.
func ValidateTrust(path *field.Path, fileField, file, insecureField string, insecure bool, need string) field.ErrorList {
	switch {
	case file == "" && !insecure:
		return field.ErrorList{field.Required(path.Child(fileField), need+" (or "+insecureField+": true, not recommended)")}
	case file != "" && insecure:
		return field.ErrorList{field.Forbidden(path.Child(insecureField), "give "+fileField+" or "+insecureField+", not both")}
	}
	return nil
}

// vlanMax is the highest 802.1Q VLAN ID (4095 is reserved).
const vlanMax = 4094

// ValidateVLANTag checks the VLAN tag at path: 0 (none) or a VLAN ID.
func ValidateVLANTag(path *field.Path, tag int) field.ErrorList {
	if tag != 0 && (tag < 1 || tag > vlanMax) {
		return field.ErrorList{field.Invalid(path, tag, fmt.Sprintf("must be between 1 and %d", vlanMax))}
	}
	return nil
}
