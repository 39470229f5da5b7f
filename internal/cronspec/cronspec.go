// Package cronspec is the one home of fleetwave's cron dialect: the strict
// five-field form (minute hour day-of-month month day-of-week) and the
// @descriptors (@hourly, @daily, @every 1h, ...), as robfig/cron parses
// them. The schema validates with it, the reconciler fires schedules with
// it and the engine opens maintenance windows with it, so an expression
// means the same thing everywhere.
package cronspec

import "github.com/robfig/cron/v3"

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse parses expr in fleetwave's dialect.
func Parse(expr string) (cron.Schedule, error) { return parser.Parse(expr) }
