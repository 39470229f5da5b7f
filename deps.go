//go:build tools

package fleetwave

import (
	_ "cuelang.org/go/cue"
	_ "github.com/alicebob/miniredis/v2"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/go-git/go-git/v5"
	_ "github.com/nikolalohinski/gonja/v2"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/robfig/cron/v3"
	_ "github.com/rs/zerolog"
	_ "github.com/spf13/cobra"
	_ "go.yaml.in/yaml/v3"
)
