package schema

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/token"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/cronspec"
)

// Limits of the rules (docs/contract.md#rules) and of the name rules.
const (
	maxLabels   = 16
	maxLabelLen = 63
	// DefaultActionTimeout is the timeout of a block action that sets none.
	DefaultActionTimeout = fleetwave.DefaultActionTimeout
)

var (
	nameRE       = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	dnsPrefixRE  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`)
	cronFromTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC) // fixed: validation never reads the clock
)

// fileChecker collects errors of one file, positioned at fields of its data.
type fileChecker struct {
	path string
	data cue.Value
	// dataOf, when set, gives data the first time an error needs it.
	dataOf func(path string) cue.Value
	errs   []fleetwave.FileError
}

// at returns the value at a path of selectors (strings or ints).
func (c *fileChecker) at(sel ...any) cue.Value {
	if c.dataOf != nil {
		c.data, c.dataOf = c.dataOf(c.path), nil
	}
	if !c.data.Exists() {
		return cue.Value{}
	}
	return lookup(c.data, sel)
}

// errorf records an error about the value of the field sel; the message is
// prefixed with the field's path. It is positioned at the value when that
// is a scalar (the token to fix, where CUE's own errors point too), at the
// field otherwise (a struct or list: its name), and at the nearest
// enclosing field that exists when sel does not.
func (c *fileChecker) errorf(sel []any, format string, args ...any) {
	c.report(sel, false, format, args...)
}

// keyErrorf records an error about the name of the field sel (a label key,
// a window or action name), positioned at that name.
func (c *fileChecker) keyErrorf(sel []any, format string, args ...any) {
	c.report(sel, true, format, args...)
}

func (c *fileChecker) report(sel []any, atName bool, format string, args ...any) {
	fe := fleetwave.FileError{Path: c.path, Msg: fieldName(sel) + ": " + fmt.Sprintf(format, args...)}
	for len(sel) > 0 {
		v := c.at(sel...)
		pos := v.Pos()
		if !atName {
			pos = valuePos(v)
		}
		if v.Exists() && pos.Filename() == c.path && pos.Line() > 0 {
			fe.Line, fe.Col = pos.Line(), pos.Column()
			break
		}
		sel = sel[:len(sel)-1]
	}
	if fe.Line == 0 {
		fe.Line, fe.Col = 1, 1
	}
	c.errs = append(c.errs, fe)
}

// valuePos returns where the value v of a field is written: the scalar
// literal itself, or the field (its name) for a struct or list. CUE's
// Value.Pos gives the field's name for every field value.
func valuePos(v cue.Value) token.Pos {
	if f, ok := v.Source().(*ast.Field); ok {
		switch x := f.Value.(type) {
		case *ast.BasicLit, *ast.UnaryExpr:
			if x.Pos().IsValid() {
				return x.Pos()
			}
		}
	}
	return v.Pos()
}

func fieldName(sel []any) string {
	var b strings.Builder
	for i, s := range sel {
		switch s := s.(type) {
		case string:
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
		case int:
			b.WriteString("[" + strconv.Itoa(s) + "]")
		}
	}
	return b.String()
}

// fld builds a field path of selectors (strings or ints).
func fld(sel ...any) []any { return sel }

func (c *fileChecker) duration(sel []any, text string, positive bool) time.Duration {
	if text == "" {
		return 0
	}
	d, err := time.ParseDuration(text)
	switch {
	case err != nil:
		c.errorf(sel, "invalid duration %q, expected a Go duration such as \"90s\" or \"5m\"", text)
	case d < 0 || (positive && d == 0):
		c.errorf(sel, "duration %q must be positive", text)
	}
	return d
}

func (c *fileChecker) timezone(sel []any, tz string) {
	if tz == "" {
		return
	}
	if _, err := time.LoadLocation(tz); err != nil || strings.EqualFold(tz, "local") {
		c.errorf(sel, "unknown time zone %q, expected an IANA name such as \"UTC\" or \"Europe/Berlin\"", tz)
	}
}

func (c *fileChecker) cron(sel []any, expr string) {
	if strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=") {
		c.errorf(sel, "found a time zone prefix in %q, expected the zone in the timezone field", expr)
		return
	}
	s, err := cronspec.Parse(expr)
	if err != nil {
		c.errorf(sel, "invalid cron expression %q (%v), expected 5 fields (minute hour day-of-month month day-of-week) or a descriptor such as @daily", expr, err)
		return
	}
	if s.Next(cronFromTime).IsZero() {
		c.errorf(sel, "cron expression %q never fires", expr)
	}
}

// name checks a name used as a map key (a window or action name).
func (c *fileChecker) name(sel []any, what, name string) {
	if !nameRE.MatchString(name) {
		c.keyErrorf(sel, "invalid %s %q, expected a DNS-label-like name (lowercase letters, digits and '-', 1-63 chars)", what, name)
	}
}

// labelKey checks a label key: the name of the field sel (a key of
// labels) when atName, else its value (the key of a selector term).
func (c *fileChecker) labelKey(sel []any, k string, atName bool) {
	report := c.errorf
	if atName {
		report = c.keyErrorf
	}
	name := k
	if prefix, rest, ok := strings.Cut(k, "/"); ok {
		if len(prefix) > 253 || !dnsPrefixRE.MatchString(prefix) {
			report(sel, "invalid label key %q: the prefix before '/' must be a DNS subdomain such as \"example.com\"", k)
			return
		}
		name = rest
	}
	if len(name) == 0 || len(name) > maxLabelLen || !isLabelPart(name) {
		report(sel, "invalid label key %q, expected 1-63 chars of [A-Za-z0-9._-] starting and ending with a letter or digit (optionally prefixed by \"example.com/\")", k)
	}
}

func (c *fileChecker) labelValue(sel []any, v string) {
	if len(v) == 0 || len(v) > maxLabelLen || !isLabelPart(v) {
		c.errorf(sel, "invalid label value %q, expected 1-63 chars of [A-Za-z0-9._-] starting and ending with a letter or digit", v)
	}
}

// isLabelPart reports whether s matches ^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$
// (the name part of a label key, or a label value), without the regexp
// engine: every node has labels, and the regexp was a tenth of the
// validation time of a large tree.
func isLabelPart(s string) bool {
	if s == "" {
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

func (c *fileChecker) labels(sel []any, labels map[string]string, limit bool) {
	if limit && len(labels) > maxLabels {
		c.errorf(sel, "found %d labels, expected at most %d", len(labels), maxLabels)
	}
	bad := false
	for k, v := range labels {
		if labelKeyProblem(k) != "" || labelValueProblem(v) != "" {
			bad = true
			break
		}
	}
	if !bad {
		return // every node has labels: no path is built for each of them
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		s := append(slices.Clone(sel), k)
		c.labelKey(s, k, true)
		c.labelValue(s, labels[k])
	}
}

func (c *fileChecker) selector(field string, s *fleetwave.Selector) {
	c.selectorAt(fld(field), s)
}

func (c *fileChecker) selectorAt(base []any, s *fleetwave.Selector) {
	if s == nil {
		return
	}
	c.labels(append(slices.Clone(base), "match_labels"), s.MatchLabels, false)
	for i, t := range s.MatchExpressions {
		sel := append(slices.Clone(base), "match_expressions", i)
		c.labelKey(append(slices.Clone(sel), "key"), t.Key, false)
		switch t.Operator {
		case "in", "notin":
			if len(t.Values) == 0 {
				c.errorf(append(slices.Clone(sel), "values"), "operator %s needs at least one value", t.Operator)
			}
		case "exists", "doesnotexist":
			if len(t.Values) > 0 {
				c.errorf(append(slices.Clone(sel), "values"), "operator %s takes no values", t.Operator)
			}
		}
	}
}

// requires checks the requirements of a block action: a capability name,
// or "address:<name>" for a data address; neither may be empty.
func (c *fileChecker) requires(sel []any, reqs []string) {
	for i, r := range reqs {
		name, addr := strings.CutPrefix(r, fleetwave.RequireAddressPrefix)
		switch {
		case strings.TrimSpace(r) == "":
			c.errorf(append(slices.Clone(sel), i), "empty requirement, expected a capability or %q followed by a data address name", fleetwave.RequireAddressPrefix)
		case addr && strings.TrimSpace(name) == "":
			c.errorf(append(slices.Clone(sel), i), "requirement %q names no data address, expected %q followed by its name", r, fleetwave.RequireAddressPrefix)
		}
	}
}

// checkObject runs the Go checks the CUE schema does not express cleanly
// (durations, cron, time zones, label syntax, names used as map keys) and
// fills the parsed durations.
func checkObject(p string, data cue.Value, obj any) []fleetwave.FileError {
	c := &fileChecker{path: p, data: data}
	switch o := obj.(type) {
	case *fleetwave.Config:
		o.Backoff = c.duration(fld("backoff"), o.BackoffText, true)
		for _, name := range slices.Sorted(maps.Keys(o.MaintenanceWindows)) {
			w := o.MaintenanceWindows[name]
			sel := fld("maintenance_windows", name)
			c.name(sel, "window name", name)
			c.cron(append(slices.Clone(sel), "cron"), w.Cron)
			w.Duration = c.duration(append(slices.Clone(sel), "duration"), w.DurationText, true)
			c.timezone(append(slices.Clone(sel), "timezone"), w.Timezone)
			o.MaintenanceWindows[name] = w
		}
		if e := o.Enablement; e != nil {
			c.selectorAt(fld("enablement", "lifecycle", "selector"), e.Lifecycle.SelectorOrNil())
			c.selectorAt(fld("enablement", "config_apply", "selector"), e.ConfigApply.SelectorOrNil())
		}
		seen := map[fleetwave.Criticality]bool{}
		for i, cr := range o.PriorityOrder {
			if seen[cr] {
				c.errorf(fld("priority_order", i), "criticality %q is listed twice", cr)
			}
			seen[cr] = true
		}
	case *fleetwave.Trigger:
		if o.TriggerType == fleetwave.TriggerSchedule {
			if o.CronExpression == "" {
				c.errorf(fld("cron_expression"), "required field is missing (trigger_type is schedule)")
			} else {
				c.cron(fld("cron_expression"), o.CronExpression)
			}
			c.timezone(fld("timezone"), o.Timezone)
		} else {
			if o.CronExpression != "" {
				c.errorf(fld("cron_expression"), "set on a %s trigger, expected only with trigger_type: schedule", o.TriggerType)
			}
			if o.Timezone != "" {
				c.errorf(fld("timezone"), "set on a %s trigger, expected only with trigger_type: schedule", o.TriggerType)
			}
		}
		if o.MaxConcurrent > 0 && o.MaxConcurrentPercent > 0 {
			c.errorf(fld("max_concurrent_percent"), "set together with max_concurrent, expected only one of them")
		}
		c.selector("selector", o.Selector)
		if o.BlockConfigTemplate != "" {
			if msg := checkTemplate(o.BlockConfigTemplate); msg != "" {
				c.errorf(fld("block_config_template"), "invalid Jinja2 template: %s", msg)
			}
		}
	case *fleetwave.Block:
		for _, name := range slices.Sorted(maps.Keys(o.Actions)) {
			a := o.Actions[name]
			sel := fld("actions", name)
			c.name(sel, "action name", name)
			a.Timeout = c.duration(append(slices.Clone(sel), "timeout"), a.TimeoutText, true)
			c.requires(append(slices.Clone(sel), "requires"), a.Requires)
			o.Actions[name] = a
		}
		if o.Detect != nil {
			o.Detect.Timeout = c.duration(fld("detect", "timeout"), o.Detect.TimeoutText, true)
		}
		if o.ConfigSchema != "" {
			if _, err := compileConfigSchema(o.ConfigSchema); err != nil {
				c.errorf(fld("config_schema"), "invalid CUE config schema: %s", firstLine(err.Error()))
			}
		}
	case *fleetwave.Node:
		c.labels(fld("labels"), o.Labels, true)
	case *fleetwave.RolloutRequest:
		c.selector("selector", o.Selector)
	}
	return c.errs
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSuffix(strings.TrimSpace(s), ":")
}
