// Package bounds holds the cheap pre-checks that keep recursive parsers
// (CUE, gonja) away from inputs deep enough to overflow the goroutine
// stack, which no recover can catch.
package bounds

// NestingDepth is the deepest nesting of (, [ and { in s; closing brackets
// without an opening one are ignored. It looks at every byte once.
func NestingDepth(s string) int {
	depth, deepest := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ')', ']', '}':
			if depth > 0 {
				depth--
			}
		}
	}
	return deepest
}
