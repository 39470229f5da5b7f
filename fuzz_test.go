package fleetwave

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fzSelector reads a selector from the fuzzer's text, one term per line,
// fields separated by tabs: "L<TAB>key<TAB>value" is a match_labels entry;
// any other line is a match_expressions term "key<TAB>operator<TAB>value...".
func fzSelector(raw string) *Selector {
	s := &Selector{}
	if raw == "" {
		return s
	}
	for _, line := range strings.Split(raw, "\n") {
		fields := strings.Split(line, "\t")
		if fields[0] == "L" && len(fields) == 3 {
			if s.MatchLabels == nil {
				s.MatchLabels = map[string]string{}
			}
			s.MatchLabels[fields[1]] = fields[2]
			continue
		}
		term := SelectorTerm{Key: fields[0]}
		if len(fields) >= 2 {
			term.Operator = fields[1]
		}
		if len(fields) >= 3 {
			term.Values = fields[2:]
		}
		s.MatchExpressions = append(s.MatchExpressions, term)
	}
	return s
}

// fzLabelMap reads node labels: one "key=value" per line (the last of a
// key given twice wins).
func fzLabelMap(raw string) map[string]string {
	labels := map[string]string{}
	if raw == "" {
		return labels
	}
	for _, line := range strings.Split(raw, "\n") {
		k, v, _ := strings.Cut(line, "=")
		labels[k] = v
	}
	return labels
}

// fzTermMatches is the reference meaning of one term (Kubernetes' label
// selector operators, lower-case): in needs the key with one of the
// values, notin holds unless the key has one of the values, exists and
// doesnotexist test the key; any other operator matches nothing.
func fzTermMatches(t SelectorTerm, labels map[string]string) bool {
	v, ok := labels[t.Key]
	in := ok && slices.Contains(t.Values, v)
	switch t.Operator {
	case "in":
		return in
	case "notin":
		return !in
	case "exists":
		return ok
	case "doesnotexist":
		return !ok
	}
	return false
}

// fzMatches is the reference Selector.Matches: every match_labels entry
// equal, every term true.
func fzMatches(s *Selector, labels map[string]string) bool {
	for k, want := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != want {
			return false
		}
	}
	for _, t := range s.MatchExpressions {
		if !fzTermMatches(t, labels) {
			return false
		}
	}
	return true
}

// FuzzSelector checks Selector.Matches on arbitrary selectors and label
// maps (nothing validated: the schema refuses bad selectors, Matches must
// still answer): it never panics and agrees with the reference; nil and
// empty selectors match everything; notin is the negation of in when the
// key is present (and holds when it is absent, where in does not); exists
// and doesnotexist are each other's negation; a selector is the
// conjunction of its terms; nil labels are no labels; Matches modifies
// neither argument; EnablementScope.Includes with only a selector is
// "not empty and matches".
func FuzzSelector(f *testing.F) {
	f.Add("L\tenv\tprod\nzone\tin\teu-1\teu-2\ngpu\texists", "env=prod\nzone=eu-2\ngpu=")
	f.Add("zone\tnotin\teu-1", "zone=eu-1")
	f.Add("zone\tIN\teu-1", "zone=eu-1")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, rawSel, rawLabels string) {
		s := fzSelector(rawSel)
		labels := fzLabelMap(rawLabels)
		sCopy := &Selector{MatchLabels: maps.Clone(s.MatchLabels)}
		for _, term := range s.MatchExpressions {
			sCopy.MatchExpressions = append(sCopy.MatchExpressions, SelectorTerm{Key: term.Key, Operator: term.Operator, Values: slices.Clone(term.Values)})
		}
		lCopy := maps.Clone(labels)

		got := s.Matches(labels)
		if want := fzMatches(s, labels); got != want {
			t.Fatalf("Matches(%q) = %v, the reference says %v, selector %#v", labels, got, want, s)
		}
		if !reflect.DeepEqual(s, sCopy) || !maps.Equal(labels, lCopy) {
			t.Fatal("Matches modified its selector or labels")
		}
		if !(*Selector)(nil).Matches(labels) || !(&Selector{}).Matches(labels) {
			t.Fatal("a nil or empty selector does not match everything")
		}
		if len(labels) == 0 && s.Matches(nil) != got {
			t.Fatal("nil labels and no labels differ")
		}
		all := true
		for k, v := range s.MatchLabels {
			all = all && (&Selector{MatchLabels: map[string]string{k: v}}).Matches(labels)
		}
		for _, term := range s.MatchExpressions {
			one := func(op string) bool {
				return (&Selector{MatchExpressions: []SelectorTerm{{Key: term.Key, Operator: op, Values: term.Values}}}).Matches(labels)
			}
			all = all && one(term.Operator)
			_, present := labels[term.Key]
			if in, notin := one("in"), one("notin"); (present && in == notin) || (!present && (in || !notin)) {
				t.Fatalf("key %q (present %v), values %q: in %v, notin %v", term.Key, present, term.Values, in, notin)
			}
			if one("exists") == one("doesnotexist") || one("exists") != present {
				t.Fatalf("key %q (present %v): exists and doesnotexist are not each other's negation", term.Key, present)
			}
		}
		if all != got {
			t.Fatalf("Matches = %v, the conjunction of its terms %v", got, all)
		}
		scope := &EnablementScope{Selector: s}
		if inc := scope.Includes(&Node{ID: "n1", Labels: labels}); inc != (!s.Empty() && got) {
			t.Fatalf("Includes = %v with a selector only (empty %v, matches %v)", inc, s.Empty(), got)
		}
	})
}
