package engine

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Script arguments are records with named fields, defined once, here.
//
// A script receives the common head (ARGV[1..3]: prefix, fence, now; see
// lua/lib.lua), then its own head record, then its repeated records (the
// items of create_rollout, the results of complete, ...). Each record is a
// Go struct whose fields, in order, are the record's ARGV slots, each named
// by its `arg` tag. The engine prepends to every script that reads a record
// a Lua table naming its slots (scriptSource), generated from the struct:
//
//	local IF = { n = 18, node = 1, block = 2, ... }   -- a repeated record
//	local CA = { n = 6, after = 9, base = 4, ... }    -- a head record
//
// A head record's slots are ARGV indexes (ARGV[CA.base]); after is its last
// one, so what follows it starts at ARGV[CA.after + 1]. A repeated record's
// slots are offsets from the index b before its first slot, and n its
// stride: record i of a list that starts after index h is read as
// ARGV[h + i * IF.n + IF.node]. Go writes a record with append, from the
// struct, so the order Go writes and the names Lua reads cannot disagree;
// adding a field is one struct field in Go and its use in Lua.
// TestScriptArgsAreNamed checks that no script reads a record slot by a
// number and that every field is read by a script that receives it.

// commonArgs is the number of ARGV slots every script receives before its
// own (prefix, fence, now).
const commonArgs = 3

// recordDef is the shape of one record: its Lua table, its field names in
// the order Go writes them, and the scripts that receive it.
type recordDef struct {
	table   string
	head    bool // a head record: its slots are ARGV indexes
	names   []string
	scripts []string
}

// argRecord is a record written from a T, one slot per field, in order.
type argRecord[T any] struct{ recordDef }

var luaName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// newRecord builds the record of struct type T. It panics when T has a
// field without an `arg` tag, a tag used twice or reserved (n, after), or
// a type the scripts cannot receive: those are programming errors, found by
// any test of the package.
func newRecord[T any](table string, head bool, scripts ...string) argRecord[T] {
	t := reflect.TypeFor[T]()
	d := recordDef{table: table, head: head, scripts: scripts}
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("arg")
		switch {
		case !luaName.MatchString(name) || name == "n" || name == "after":
			panic(fmt.Sprintf("engine: record %s: field %s: arg tag %q is not a usable Lua name", table, f.Name, name))
		case slices.Contains(d.names, name):
			panic(fmt.Sprintf("engine: record %s: arg %q used twice", table, name))
		}
		switch f.Type.Kind() {
		case reflect.String, reflect.Int, reflect.Int64, reflect.Float64, reflect.Bool:
		default:
			panic(fmt.Sprintf("engine: record %s: field %s: type %s cannot be a script argument", table, f.Name, f.Type))
		}
		d.names = append(d.names, name)
	}
	return argRecord[T]{d}
}

// append appends v's fields to args, in order: strings and numbers as they
// are, booleans as 1 and 0.
func (r argRecord[T]) append(args []any, v T) []any {
	rv := reflect.ValueOf(v)
	for i := range rv.NumField() {
		f := rv.Field(i)
		switch f.Kind() {
		case reflect.String:
			args = append(args, f.String())
		case reflect.Int, reflect.Int64:
			args = append(args, f.Int())
		case reflect.Float64:
			args = append(args, f.Float())
		case reflect.Bool:
			args = append(args, f.Bool()) // go-redis writes 1 or 0
		}
	}
	return args
}

// slot returns the Lua value of field i: its ARGV index for a head record,
// its offset from the record's base otherwise.
func (d recordDef) slot(i int) int {
	if d.head {
		return commonArgs + 1 + i
	}
	return 1 + i
}

// lua returns the Lua definition of the record's table.
func (d recordDef) lua() string {
	var b strings.Builder
	b.WriteString("local " + d.table + " = { n = " + strconv.Itoa(len(d.names)))
	if d.head {
		b.WriteString(", after = " + strconv.Itoa(d.slot(len(d.names)-1)))
	}
	for i, name := range d.names {
		b.WriteString(", " + name + " = " + strconv.Itoa(d.slot(i)))
	}
	b.WriteString(" }\n")
	return b.String()
}

// The records of the scripts.
var (
	// create_rollout.lua: the head, the window sets, the items.
	createHeadRecord = newRecord[createHead]("CH", true, "create_rollout")
	windowSetRecord  = newRecord[windowSetArg]("WS", false, "create_rollout")
	itemRecord       = newRecord[itemArg]("IF", false, "create_rollout")
	// step.lua: the head (then the jitter values), the window states.
	stepHeadRecord    = newRecord[stepHead]("SH", true, "step")
	windowStateRecord = newRecord[windowStateArg]("WST", false, "step")
	// complete.lua: the head, the results.
	completeHeadRecord = newRecord[completeHead]("CA", true, "complete")
	resultRecord       = newRecord[resultArg]("RF", false, "complete")
	// report.lua: the head, the instances.
	reportHeadRecord = newRecord[reportHead]("RH", true, "report")
	instanceRecord   = newRecord[instanceArg]("IN", false, "report")
	// the scripts with a head only
	campaignRecord     = newRecord[campaignArgs]("CP", true, "campaign")
	renewRecord        = newRecord[renewArgs]("RN", true, "renew")
	resignRecord       = newRecord[resignArgs]("RS", true, "resign")
	setStateRecord     = newRecord[setStateArgs]("SS", true, "set_state")
	releaseRecord      = newRecord[releaseArgs]("RL", true, "release")
	recordTableRecord  = newRecord[recordArgs]("RC", true, "record")
	approvalStepRecord = newRecord[approvalArgs]("AP", true, "approval")
	undeliverRecord    = newRecord[undeliverArgs]("UD", true, "undeliver")
	popRecord          = newRecord[popArgs]("PO", true, "pop")
)

// records lists every record, for scriptSource and the tests.
var records = []recordDef{
	createHeadRecord.recordDef, windowSetRecord.recordDef, itemRecord.recordDef,
	stepHeadRecord.recordDef, windowStateRecord.recordDef,
	completeHeadRecord.recordDef, resultRecord.recordDef,
	reportHeadRecord.recordDef, instanceRecord.recordDef,
	campaignRecord.recordDef, renewRecord.recordDef, resignRecord.recordDef, setStateRecord.recordDef,
	releaseRecord.recordDef, recordTableRecord.recordDef, approvalStepRecord.recordDef, undeliverRecord.recordDef,
	popRecord.recordDef,
}

// recordsPrelude returns the Lua tables of the records script name receives.
func recordsPrelude(name string) string {
	var b strings.Builder
	for _, d := range records {
		if slices.Contains(d.scripts, name) {
			b.WriteString(d.lua())
		}
	}
	return b.String()
}

// createHead is the head of create_rollout.lua: then come WindowSets
// windowSetArg records, then the items (itemArg; their count is in the
// header).
type createHead struct {
	Header     string `arg:"header"` // rolloutHeader, JSON
	WindowSets int    `arg:"window_sets"`
}

// windowSetArg is a window set the items refer to: its id and definition
// (JSON), stored once (content-addressed).
type windowSetArg struct {
	ID  string `arg:"id"`
	Def string `arg:"def"`
}

// itemArg is one item of create_rollout.lua.
type itemArg struct {
	Node          string `arg:"node"`
	Block         string `arg:"block"`
	Action        string `arg:"action"`
	Generation    int64  `arg:"generation"`
	TargetVersion string `arg:"target_version"`
	ConfigHash    string `arg:"config_hash"`
	DesiredState  string `arg:"desired_state"`
	ManagedBy     string `arg:"managed_by"` // the lane
	Criticality   string `arg:"criticality"`
	OneShot       bool   `arg:"one_shot"`
	TimeoutMS     int64  `arg:"timeout_ms"`
	Payload       string `arg:"payload"` // the attempt template (JSON)
	WindowSet     string `arg:"wset"`    // "" = always open
	// Reason: the skip reason ("" = none), or the reason of a blocked item.
	Reason   string `arg:"reason"`
	Group    string `arg:"group"`    // split group, "" = none
	Requires string `arg:"requires"` // newline-separated
	// Blocked: "" or the message of an item created blocked (never
	// dispatched; its reason is Reason, e.g. invalid_config).
	Blocked     string `arg:"blocked"`
	Operational bool   `arg:"op"` // a backup, restart...: leaves the instance as it is
}

// stepHead is the head of step.lua: then come Jitters jitter values in
// [0,1), then WindowSets windowStateArg records.
type stepHead struct {
	Grace       int64 `arg:"grace"` // delivery grace, ms
	BackoffBase int64 `arg:"backoff_base"`
	BackoffMax  int64 `arg:"backoff_max"`
	DefTimeout  int64 `arg:"def_timeout"` // default action timeout, ms
	Limit       int   `arg:"limit"`       // batch limit
	Jitters     int   `arg:"jitters"`
	WindowSets  int   `arg:"window_sets"`
}

// windowStateArg is a window set's state at now: open, or when it next
// opens (ms, 0 = not known).
type windowStateArg struct {
	ID     string `arg:"id"`
	Open   bool   `arg:"open"`
	NextMS int64  `arg:"next"`
}

// completeHead is the head of complete.lua: then come Results resultArg
// records.
type completeHead struct {
	BackoffBase int64 `arg:"backoff_base"`
	BackoffMax  int64 `arg:"backoff_max"`
	Grace       int64 `arg:"grace"`
	DefTimeout  int64 `arg:"def_timeout"`
	Limit       int   `arg:"limit"`
	Results     int   `arg:"results"`
	// Token names this one group (Engine.token): the same group sent again
	// by the Redis client answers each result as the first sending did.
	Token string `arg:"token"`
}

// resultArg is one agent result of complete.lua (see resultArgs).
type resultArg struct {
	Node     string  `arg:"node"`
	Attempt  string  `arg:"attempt"`
	Fence    string  `arg:"fence"`
	Class    string  `arg:"class"`
	ExitCode int     `arg:"exit_code"`
	Jitter   float64 `arg:"jitter"`
	// the observed instance: its JSON ("" = none), updated_at (agent ms),
	// generation (-1 = none), version and state
	Instance     string `arg:"instance"`
	InstanceAt   int64  `arg:"instance_at"`
	InstanceGen  int64  `arg:"instance_gen"`
	InstanceVer  string `arg:"instance_version"`
	InstanceStat string `arg:"instance_state"`
	Output       string `arg:"output"` // the output tail kept for a failure
	Reason       string `arg:"reason"` // of a permanent result
}

// reportHead is the head of report.lua: then come Instances instanceArg
// records.
type reportHead struct {
	Node      string `arg:"node"`
	Report    string `arg:"report"` // JSON, without instances
	SentAt    int64  `arg:"sent_at"`
	Instances int    `arg:"instances"`
}

// instanceArg is one instance of a report.
type instanceArg struct {
	Block      string `arg:"block"`
	Generation int64  `arg:"generation"`
	ConfigHash string `arg:"config_hash"`
	State      string `arg:"state"`
	Version    string `arg:"version"`
	JSON       string `arg:"json"`
}

// campaignArgs: campaign.lua (Campaign).
type campaignArgs struct {
	Hub      string `arg:"hub"`
	Instance string `arg:"instance"` // the caller's process; "" = none
	TTLMS    int64  `arg:"ttl_ms"`
	Floor    int64  `arg:"floor"`   // the highest fence known to have been used; 0 = none
	Restart  bool   `arg:"restart"` // Redis restarted since the caller last looked
	Fresh    bool   `arg:"fresh"`   // the caller never held a lease (a new process)
}

// renewArgs: renew.lua (Renew).
type renewArgs struct {
	Hub      string `arg:"hub"`
	Instance string `arg:"instance"`
	TTLMS    int64  `arg:"ttl_ms"`
	Restart  bool   `arg:"restart"`
}

// resignArgs: resign.lua (Resign).
type resignArgs struct {
	Hub      string `arg:"hub"`
	Instance string `arg:"instance"` // "" = whichever instance holds the fence
}

// setStateArgs: set_state.lua (SetRolloutState).
type setStateArgs struct {
	Rollout string `arg:"rollout"`
	Action  string `arg:"action"` // pause | resume | cancel
	Actor   string `arg:"actor"`
}

// releaseArgs: release.lua (Release).
type releaseArgs struct {
	Rollout string `arg:"rollout"`
	Hold    string `arg:"hold"` // the hold to lift
}

// recordArgs: record.lua (the hub's record tables).
type recordArgs struct {
	Table string `arg:"table"` // requests | sched
	Field string `arg:"field"`
	Value string `arg:"value"`
	Mode  string `arg:"mode"` // nx | set
}

// approvalArgs: approval.lua; each op reads the fields it needs.
type approvalArgs struct {
	Op       string `arg:"op"` // submit | decide | consume | expire | stale
	ID       string `arg:"id"`
	Record   string `arg:"record"`   // submit: the record, JSON
	Actor    string `arg:"actor"`    // decide
	Decision string `arg:"decision"` // decide: approved | rejected
	Rollout  string `arg:"rollout"`  // consume
	Reason   string `arg:"reason"`   // expire, stale
}

// undeliverArgs: undeliver.lua (a popped attempt that was not handed
// out: too late, or its poll's client gone). Unsent (1) marks it never
// delivered; Expire (1) moves its deadline to now.
type undeliverArgs struct {
	Attempt string `arg:"attempt"`
	Unsent  int    `arg:"unsent"`
	Expire  int    `arg:"expire"`
}

// popArgs: pop.lua (a poll takes up to Max attempts of Node's queue; its
// agent holds the deliveries up to Delivered; Token names this pop, so
// that the same pop sent again answers what it popped the first time).
type popArgs struct {
	Node      string `arg:"node"`
	Max       int    `arg:"max"`
	Delivered int64  `arg:"delivered"`
	Token     string `arg:"token"`
	// Ask asks whether an item of the node awaits its full report (a
	// Poll's own look: see Engine.look).
	Ask bool `arg:"ask"`
}
