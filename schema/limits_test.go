package schema

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestHostileFilesAreRefusedInBoundedTimeAndMemory loads files built to
// exhaust a parser or evaluator and checks each is refused, quickly, with
// little memory and with a message that says why.
func TestHostileFilesAreRefusedInBoundedTimeAndMemory(t *testing.T) {
	bomb := "kind: node\nname: n3\ncapabilities: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
	for i := range 9 {
		bomb += "x" + string(rune('b'+i)) + ": &" + string(rune('b'+i)) + " [" + strings.Repeat("*"+string(rune('a'+i))+", ", 8) + "*" + string(rune('a'+i)) + "]\n"
	}
	cases := []struct {
		name, path, data, want string
	}{
		{"a YAML alias bomb (billion laughs)", "nodes/n3.yaml", bomb, "YAML aliases expand this file"},
		{"one large string aliased many times", "blocks/big.yaml",
			"kind: block\nname: big\ndescription: &d \"" + strings.Repeat("x", 200_000) + "\"\nactions:\n" + strings.Repeat("  a: {command: *d}\n", 1) +
				func() string {
					var b strings.Builder
					for i := range 400 {
						b.WriteString("  a" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ": {command: *d}\n")
					}
					return b.String()
				}(), "YAML aliases expand this file"},
		{"deeply nested YAML flow collections", "nodes/n3.yaml", "kind: node\nname: n3\nlabels: " + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + "\n", "nesting deeper than 100 levels"},
		{"deeply nested YAML block mappings", "nodes/n3.yaml", "kind: node\nname: n3\nlabels:\n" + func() string {
			var b strings.Builder
			for i := 1; i < 500; i++ {
				b.WriteString(strings.Repeat(" ", i) + "a:\n")
			}
			return b.String()
		}(), "nesting deeper than 100 levels"},
		{"YAML beyond the decoder's own depth limit", "nodes/n3.yaml", "kind: node\nname: n3\nlabels: " + strings.Repeat("{a: ", 100_000) + "1" + strings.Repeat("}", 100_000) + "\n", "exceeded max depth"},
		{"deeply nested JSON", "nodes/n3.json", `{"kind": "node", "name": "n3", "labels": ` + strings.Repeat(`{"a": `, 100_000) + "1" + strings.Repeat("}", 100_000) + "}", "nesting deeper than 100 levels"},
		// Without the depth check this file ends the process with a fatal
		// stack overflow inside CUE's parser (no recover can catch it).
		{"a deep CUE field chain", "nodes/n3.cue", "kind: \"node\"\nname: \"n3\"\nlabels: " + strings.Repeat("a: ", 300_000) + "1\n", "nesting deeper than 100 levels"},
		{"a CUE expression that grows exponentially", "nodes/n3.cue", "kind: \"node\"\nname: \"n3\"\na: \"x\"\nb: a+a\nc: b+b\nd: c+c\ne: d+d\nf: e+e\ng: f+f\nh: g+g\ni: h+h\nj: i+i\nk: j+j\nl: k+k\nm: l+l\nn: m+m\no: n+n\np: o+o\nq: p+p\nr: q+q\ns: r+r\nt: s+s\nu: t+t\nv: u+u\nw: v+v\nx: w+w\ny: x+x\nz: y+y\n", "expected plain data"},
		// gonja's parser recurses once per bracket: 30,000 of them (well
		// under the 64 KiB template limit) overflow the stack.
		{"a deeply nested template expression", "brc/deep.yaml", "kind: trigger\nname: deep\nblock_name: web\nblock_config_template: \"{{ " + strings.Repeat("(", 30_000) + "1" + strings.Repeat(")", 30_000) + " }}\"\n", "nested deeper than 100 levels"},
	}
	v := newValidator(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tree := baseTree()
			tree[tc.path] = []byte(tc.data)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := v.Load(tree)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			got, lerr := errorLines(err)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), tc.want) {
				t.Errorf("errors = %q, want one containing %q", got, tc.want)
			}
			if took > 3*time.Second {
				t.Errorf("refused after %v, expected well under a second", took)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 512<<20 {
				t.Errorf("allocated %d MiB while refusing a %d-byte file", alloc>>20, len(tc.data))
			}
			t.Logf("%s: %v, %d KiB allocated", got[0][:min(len(got[0]), 80)], took.Round(time.Millisecond), (after.TotalAlloc-before.TotalAlloc)>>10)
		})
	}
}
