package schema

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	cueyaml "cuelang.org/go/encoding/yaml"

	"github.com/fleetwave/fleetwave/internal/bounds"
)

// configSchemas caches compiled block config schemas by their source.
var configSchemas sync.Map // string -> cue.Value

// ValidateConfig checks a rendered block config (YAML) against the block's
// config_schema, a CUE expression such as
// `{replicas: int & >=1 & <=5, region: string}` (closed: fields it does not
// name are refused). The error names the
// offending fields and what they must satisfy but never the rendered values,
// which may hold credentials.
func ValidateConfig(schemaExpr, rendered string) error {
	sch, err := compileConfigSchema(schemaExpr)
	if err != nil {
		return err
	}
	f, err := cueyaml.Extract("config.yaml", []byte(rendered))
	if err != nil {
		return errors.New("rendered config is not valid YAML")
	}
	ctx := sch.Context()
	v := sch.Unify(ctx.BuildFile(f))
	if err := v.Validate(cue.Concrete(true)); err != nil {
		seen := map[string]bool{}
		var fields []string
		for _, e := range cueerrors.Errors(err) {
			path := e.Path()
			if len(path) > 0 && path[0] == "#Config" {
				path = path[1:] // the definition the schema is compiled as
			}
			p := strings.Join(path, ".")
			if p == "" {
				p = "(top level)"
			}
			if !seen[p] {
				seen[p] = true
				fields = append(fields, p)
			}
		}
		sort.Strings(fields)
		return fmt.Errorf("rendered config does not satisfy config_schema at %s", strings.Join(fields, ", "))
	}
	return nil
}

func compileConfigSchema(expr string) (cue.Value, error) {
	if v, ok := configSchemas.Load(expr); ok {
		return v.(cue.Value), nil
	}
	if len(expr) > 64<<10 {
		return cue.Value{}, errors.New("config_schema is larger than 64 KiB")
	}
	if d := bounds.NestingDepth(expr); d > MaxNestingDepth {
		return cue.Value{}, fmt.Errorf("config_schema nests %d deep, limit %d", d, MaxNestingDepth)
	}
	// as a definition, so the struct is closed: unknown fields are errors
	root := cuecontext.New().CompileString("#Config: "+expr, cue.Filename("config_schema"))
	if err := root.Err(); err != nil {
		return cue.Value{}, fmt.Errorf("config_schema does not compile: %s", strings.TrimSpace(cueerrors.Details(err, nil)))
	}
	v := root.LookupPath(cue.ParsePath("#Config"))
	if err := v.Err(); err != nil {
		return cue.Value{}, fmt.Errorf("config_schema does not compile: %s", strings.TrimSpace(cueerrors.Details(err, nil)))
	}
	configSchemas.Store(expr, v)
	return v, nil
}
