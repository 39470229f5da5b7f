// Package examples embeds the example config repositories so that
// `fleetwave demo` works from the binary alone.
package examples

import "embed"

// FS holds the example repositories; fleet/ is the one the demo uses.
//
//go:embed all:fleet
var FS embed.FS
