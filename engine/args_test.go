package engine

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// luaSources returns the scripts of lua/ by name (without .lua), their
// comments removed.
func luaSources(t *testing.T) map[string]string {
	t.Helper()
	entries, err := luaFS.ReadDir("lua")
	if err != nil {
		t.Fatal(err)
	}
	comment := regexp.MustCompile(`(?m)--.*$`)
	out := map[string]string{}
	for _, e := range entries {
		src, err := luaFS.ReadFile("lua/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(e.Name(), ".lua")] = comment.ReplaceAllString(string(src), "")
	}
	return out
}

// argvIndexes returns the index expressions of the ARGV[...] reads in src.
func argvIndexes(src string) []string {
	var out []string
	for rest := src; ; {
		i := strings.Index(rest, "ARGV[")
		if i < 0 {
			return out
		}
		rest = rest[i+len("ARGV["):]
		depth, end := 1, 0
		for end < len(rest) && depth > 0 {
			switch rest[end] {
			case '[':
				depth++
			case ']':
				depth--
			}
			end++
		}
		out = append(out, strings.TrimSpace(rest[:end-1]))
		rest = rest[end:]
	}
}

// TestScriptArgsAreNamed: the scripts read the records of args.go by name
// only. No script that receives a record reads an ARGV slot past the common
// head by a number, or computes a slot or a stride with a number (b + 7,
// 9 + i * 13); every field of a record is read by a script that receives
// it; a script names only the record tables and fields it receives.
func TestScriptArgsAreNamed(t *testing.T) {
	srcs := luaSources(t)
	receives := map[string][]recordDef{} // script -> its records
	tables := map[string]recordDef{}
	for _, d := range records {
		if _, dup := tables[d.table]; dup {
			t.Errorf("two records use the Lua table %s", d.table)
		}
		tables[d.table] = d
		for _, s := range d.scripts {
			if _, ok := srcs[s]; !ok {
				t.Errorf("record %s: no script %s.lua", d.table, s)
			}
			receives[s] = append(receives[s], d)
		}
	}
	number := regexp.MustCompile(`\b\d+\b`)
	ident := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	stride := regexp.MustCompile(`\b\d+\s*\*\s*[A-Za-z_]|[A-Za-z_][A-Za-z0-9_]*\s*\*\s*\d+\b`)
	ref := regexp.MustCompile(`\b([A-Z][A-Z0-9]*)\.([a-z_][a-z0-9_]*)\b`)
	for name, src := range srcs {
		recs := receives[name]
		for _, e := range argvIndexes(src) {
			switch {
			case ident.MatchString(e):
			case number.MatchString(e) && e == number.FindString(e):
				if n, _ := strconv.Atoi(e); n > commonArgs && len(recs) > 0 {
					t.Errorf("%s.lua reads ARGV[%s]: a script with argument records reads its head by name", name, e)
				}
			case number.MatchString(e):
				t.Errorf("%s.lua reads ARGV[%s]: a record slot computed with a number, not a field name", name, e)
			case !ref.MatchString(e):
				t.Errorf("%s.lua reads ARGV[%s]: the slot names no record field", name, e)
			}
		}
		if len(recs) > 0 {
			for _, m := range stride.FindAllString(src, -1) {
				t.Errorf("%s.lua computes %q: a record stride is its table's n", name, m)
			}
		}
		for _, m := range ref.FindAllStringSubmatch(src, -1) {
			d, ok := tables[m[1]]
			if !ok {
				continue // not a record table (e.g. WV)
			}
			if !slices.Contains(d.scripts, name) {
				t.Errorf("%s.lua reads %s.%s but does not receive record %s", name, m[1], m[2], m[1])
			} else if !slices.Contains(d.names, m[2]) && m[2] != "n" && !(d.head && m[2] == "after") {
				t.Errorf("%s.lua reads %s.%s: record %s has no field %s", name, m[1], m[2], m[1], m[2])
			}
		}
	}
	for _, d := range records {
		var used string
		for _, s := range d.scripts {
			used += srcs[s]
		}
		names := append([]string{}, d.names...)
		if d.head {
			for _, o := range receives[d.scripts[0]] {
				if !o.head {
					names = append(names, "after") // where the records that follow start
					break
				}
			}
		} else {
			names = append(names, "n") // the stride
		}
		for _, f := range names {
			if !regexp.MustCompile(`\b` + d.table + `\.` + f + `\b`).MatchString(used) {
				t.Errorf("record %s: no script of %v reads %s.%s", d.table, d.scripts, d.table, f)
			}
		}
	}
}

// TestScriptArgsAgree: on a real Redis, a script given a head record and
// two repeated records written by Go reads each field, by its name, as the
// value Go gave it.
func TestScriptArgsAgree(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	// check has a script read, by name, the head and the records that
	// follow it, and compares that with what Go wrote
	check := func(t *testing.T, head recordDef, headArgs []any, each recordDef, eachArgs [][]any) {
		t.Helper()
		// the script returns name, value pairs: the head's, then each record's
		var lua strings.Builder
		lua.WriteString(head.lua() + each.lua() + "local out = {}\n")
		for _, f := range head.names {
			fmt.Fprintf(&lua, "out[#out + 1] = '%s'; out[#out + 1] = ARGV[%s.%s]\n", f, head.table, f)
		}
		fmt.Fprintf(&lua, "for i = 0, %d do\n  local b = %s.after + i * %s.n\n", len(eachArgs)-1, head.table, each.table)
		for _, f := range each.names {
			fmt.Fprintf(&lua, "  out[#out + 1] = '%s'; out[#out + 1] = ARGV[b + %s.%s]\n", f, each.table, f)
		}
		lua.WriteString("end\nreturn out\n")
		argv := append([]any{"p", "", 0}, headArgs...)
		for _, a := range eachArgs {
			argv = append(argv, a...)
		}
		v, err := rdb.Eval(ctx, lua.String(), nil, argv...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for i, f := range head.names {
			want = append(want, f, luaArg(headArgs[i]))
		}
		for _, a := range eachArgs {
			for i, f := range each.names {
				want = append(want, f, luaArg(a[i]))
			}
		}
		if !slices.Equal(v, want) {
			t.Errorf("read by name:\n%q\nwritten:\n%q", v, want)
		}
	}
	t.Run("create_rollout", func(t *testing.T) {
		check(t, createHeadRecord.recordDef, createHeadRecord.append(nil, sample[createHead](0)),
			itemRecord.recordDef, [][]any{itemRecord.append(nil, sample[itemArg](1)), itemRecord.append(nil, sample[itemArg](2))})
	})
	t.Run("create_rollout window sets", func(t *testing.T) {
		check(t, createHeadRecord.recordDef, createHeadRecord.append(nil, sample[createHead](0)),
			windowSetRecord.recordDef, [][]any{windowSetRecord.append(nil, sample[windowSetArg](1))})
	})
	t.Run("complete", func(t *testing.T) {
		check(t, completeHeadRecord.recordDef, completeHeadRecord.append(nil, sample[completeHead](0)),
			resultRecord.recordDef, [][]any{resultRecord.append(nil, sample[resultArg](1)), resultRecord.append(nil, sample[resultArg](2))})
	})
	t.Run("report", func(t *testing.T) {
		check(t, reportHeadRecord.recordDef, reportHeadRecord.append(nil, sample[reportHead](0)),
			instanceRecord.recordDef, [][]any{instanceRecord.append(nil, sample[instanceArg](1)), instanceRecord.append(nil, sample[instanceArg](2))})
	})
	t.Run("step", func(t *testing.T) {
		check(t, stepHeadRecord.recordDef, stepHeadRecord.append(nil, sample[stepHead](0)),
			windowStateRecord.recordDef, [][]any{windowStateRecord.append(nil, sample[windowStateArg](1)), windowStateRecord.append(nil, sample[windowStateArg](2))})
	})
}

// sample returns a T whose fields all hold different values (k tells
// records apart); booleans alternate.
func sample[T any](k int) T {
	var v T
	rv := reflect.ValueOf(&v).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(fmt.Sprintf("r%d-f%d", k, i))
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(1000*k + i))
		case reflect.Float64:
			f.SetFloat(float64(k) + float64(i)/100)
		case reflect.Bool:
			f.SetBool((k+i)%2 == 1)
		}
	}
	return v
}

// luaArg is an argument as a script receives it.
func luaArg(v any) string {
	switch x := v.(type) {
	case bool:
		if x {
			return "1"
		}
		return "0"
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}
