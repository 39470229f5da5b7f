package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/fleetwave/fleetwave"
)

// selectorExample is the Try: line of a bad --selector.
const selectorExample = `--selector 'env=prod,tier in (edge,core),!canary'`

// Label selectors, in the syntax kubectl takes:
//
//	selector := term { "," term }
//	term     := key ("=" | "==") value        match_labels
//	          | key "!=" value                notin (value)
//	          | key ("in" | "notin") "(" value { "," value } ")"
//	          | key                           exists
//	          | "!" key                       doesnotexist
//
// White space around keys, operators and values is ignored; a comma inside
// parentheses belongs to the list. Keys and values follow fleetwave's label
// syntax (1-63 chars of [A-Za-z0-9._-], alphanumeric at both ends; a key
// may have a DNS prefix "example.com/"). Values may not be empty.

var selectorDNSPrefix = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`)

// parseSelector parses one --selector text into a Selector; the error
// says what is wrong with which term.
func parseSelector(text string) (*fleetwave.Selector, error) {
	if strings.TrimSpace(text) == "" {
		return nil, errors.New("empty selector")
	}
	terms, err := splitSelector(text)
	if err != nil {
		return nil, err
	}
	s := &fleetwave.Selector{}
	for _, t := range terms {
		if err := parseSelectorTerm(s, t); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// splitSelector splits text at its top-level commas.
func splitSelector(text string) ([]string, error) {
	var terms []string
	depth, start := 0, 0
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case '(':
			if depth > 0 {
				return nil, fmt.Errorf("nested '(' at offset %d: a value list is one level of parentheses", i)
			}
			depth++
		case ')':
			if depth == 0 {
				return nil, fmt.Errorf("')' without '(' at offset %d", i)
			}
			depth--
		case ',':
			if depth == 0 {
				terms = append(terms, text[start:i])
				start = i + 1
			}
		}
	}
	if depth > 0 {
		return nil, errors.New("'(' is never closed: want key in (a,b)")
	}
	terms = append(terms, text[start:])
	for i, t := range terms {
		terms[i] = strings.TrimSpace(t)
		if terms[i] == "" {
			return nil, errors.New("empty term: two commas in a row, or a comma at an end")
		}
	}
	return terms, nil
}

func parseSelectorTerm(s *fleetwave.Selector, term string) error {
	if strings.ContainsAny(term, "<>") {
		return fmt.Errorf("%q: the operators < and > are not supported; use =, !=, in, notin, key or !key", term)
	}
	if i := strings.IndexByte(term, '('); i >= 0 {
		head := strings.Fields(term[:i])
		if !strings.HasSuffix(term, ")") {
			return fmt.Errorf("%q: nothing may follow the ')' of a value list", term)
		}
		if len(head) != 2 || (head[1] != "in" && head[1] != "notin") {
			return fmt.Errorf("%q: a value list goes with in or notin: want key in (a,b) or key notin (a,b)", term)
		}
		key, op := head[0], head[1]
		if err := checkLabelKey(key); err != nil {
			return fmt.Errorf("%q: %v", term, err)
		}
		var values []string
		for v := range strings.SplitSeq(term[i+1:len(term)-1], ",") {
			v = strings.TrimSpace(v)
			if v == "" {
				return fmt.Errorf("%q: empty value in the list of %s: want key %s (a,b)", term, op, op)
			}
			if err := checkLabelValue(v); err != nil {
				return fmt.Errorf("%q: %v", term, err)
			}
			if !slices.Contains(values, v) {
				values = append(values, v)
			}
		}
		s.MatchExpressions = append(s.MatchExpressions, fleetwave.SelectorTerm{Key: key, Operator: op, Values: values})
		return nil
	}
	if rest, ok := strings.CutPrefix(term, "!"); ok && !strings.Contains(rest, "=") {
		key := strings.TrimSpace(rest)
		if err := checkLabelKey(key); err != nil {
			return fmt.Errorf("%q: %v", term, err)
		}
		s.MatchExpressions = append(s.MatchExpressions, fleetwave.SelectorTerm{Key: key, Operator: "doesnotexist"})
		return nil
	}
	for _, op := range []string{"!=", "==", "="} {
		k, v, ok := strings.Cut(term, op)
		if !ok {
			continue
		}
		key, value := strings.TrimSpace(k), strings.TrimSpace(v)
		if err := checkLabelKey(key); err != nil {
			return fmt.Errorf("%q: %v", term, err)
		}
		if value == "" {
			return fmt.Errorf("%q: no value after %s (label values are never empty; to select nodes without the label use !%s)", term, op, key)
		}
		if err := checkLabelValue(value); err != nil {
			return fmt.Errorf("%q: %v", term, err)
		}
		if op == "!=" {
			s.MatchExpressions = append(s.MatchExpressions, fleetwave.SelectorTerm{Key: key, Operator: "notin", Values: []string{value}})
			return nil
		}
		if old, dup := s.MatchLabels[key]; dup && old != value {
			return fmt.Errorf("label %s given twice (%s and %s): a node has one value per key; want %s in (%s,%s)", key, old, value, key, old, value)
		}
		if s.MatchLabels == nil {
			s.MatchLabels = map[string]string{}
		}
		s.MatchLabels[key] = value
		return nil
	}
	if f := strings.Fields(term); len(f) > 1 {
		if f[1] == "in" || f[1] == "notin" {
			return fmt.Errorf("%q: the values of %s go in parentheses: want %s %s (%s)", term, f[1], f[0], f[1], strings.Join(f[2:], ","))
		}
		return fmt.Errorf("%q: unexpected space; want key=value, key in (a,b), key notin (a,b), key or !key, separated by commas", term)
	}
	if err := checkLabelKey(term); err != nil {
		return fmt.Errorf("%q: %v", term, err)
	}
	s.MatchExpressions = append(s.MatchExpressions, fleetwave.SelectorTerm{Key: term, Operator: "exists"})
	return nil
}

// checkLabelKey checks a key as fleetwave's schema does.
func checkLabelKey(k string) error {
	if k == "" {
		return errors.New("missing label key")
	}
	name := k
	if prefix, rest, ok := strings.Cut(k, "/"); ok {
		if len(prefix) > 253 || !selectorDNSPrefix.MatchString(prefix) {
			return fmt.Errorf("invalid label key %q: the prefix before '/' must be a DNS subdomain such as \"example.com\"", k)
		}
		name = rest
	}
	if !isLabelText(name) {
		return fmt.Errorf("invalid label key %q: want 1-63 chars of [A-Za-z0-9._-] starting and ending with a letter or digit (optionally prefixed by \"example.com/\")", k)
	}
	return nil
}

func checkLabelValue(v string) error {
	if !isLabelText(v) {
		return fmt.Errorf("invalid label value %q: want 1-63 chars of [A-Za-z0-9._-] starting and ending with a letter or digit", v)
	}
	return nil
}

// isLabelText reports whether s matches ^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$.
func isLabelText(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if (c != '.' && c != '_' && c != '-') || i == 0 || i == len(s)-1 {
			return false
		}
	}
	return true
}

// mergeSelectors ANDs b into a (a may be nil).
func mergeSelectors(a, b *fleetwave.Selector) (*fleetwave.Selector, error) {
	if a == nil {
		return b, nil
	}
	for _, k := range sortedLabelKeys(b.MatchLabels) {
		v := b.MatchLabels[k]
		if old, dup := a.MatchLabels[k]; dup && old != v {
			return nil, fmt.Errorf("label %s given twice (%s and %s): a node has one value per key; want %s in (%s,%s)", k, old, v, k, old, v)
		}
		if a.MatchLabels == nil {
			a.MatchLabels = map[string]string{}
		}
		a.MatchLabels[k] = v
	}
	a.MatchExpressions = append(a.MatchExpressions, b.MatchExpressions...)
	return a, nil
}

func sortedLabelKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// formatSelector writes s in the syntax parseSelector reads.
func formatSelector(s *fleetwave.Selector) string {
	var terms []string
	for _, k := range sortedLabelKeys(s.MatchLabels) {
		terms = append(terms, k+"="+s.MatchLabels[k])
	}
	for _, t := range s.MatchExpressions {
		switch t.Operator {
		case "exists":
			terms = append(terms, t.Key)
		case "doesnotexist":
			terms = append(terms, "!"+t.Key)
		default:
			terms = append(terms, fmt.Sprintf("%s %s (%s)", t.Key, t.Operator, strings.Join(t.Values, ",")))
		}
	}
	return strings.Join(terms, ",")
}
