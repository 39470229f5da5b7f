package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/fleetgen"
	"github.com/fleetwave/fleetwave/schema"
)

func schemaCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "schema", Short: "The config repository's schema"}
	var jsonSchema bool
	export := &cobra.Command{
		Use:   "export --jsonschema",
		Short: "Print the schema as JSON Schema (draft 2020-12) for YAML and JSON editors",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if !jsonSchema {
				return usageError{"export needs a format", "fleetwave schema export --jsonschema > fleetwave.schema.json"}
			}
			doc, err := schema.ExportJSONSchema()
			if err != nil {
				return err
			}
			_, err = stdout.Write(append(doc, '\n'))
			return err
		},
	}
	export.Flags().BoolVar(&jsonSchema, "jsonschema", false, "JSON Schema output")
	reference := &cobra.Command{
		Use:   "reference",
		Short: "Print the reference of every file kind and field (Markdown, as in " + schema.ReferenceFile + ")",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			doc, err := schema.Reference()
			if err != nil {
				return err
			}
			_, err = stdout.Write(doc)
			return err
		},
	}
	cmd.AddCommand(export, reference)
	return cmd
}

func devCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "dev", Short: "Developer tools", Hidden: true}
	var nodes, brcs, blocks int
	var seed int64
	gen := &cobra.Command{
		Use:   "gen-fleet DIR",
		Short: "Write a valid synthetic config repository (for benchmarks)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := fleetgen.Generate(args[0], nodes, brcs, blocks, seed); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "wrote %s: %d nodes, %d BRCs, %d blocks\n", args[0], nodes, brcs, blocks)
			return nil
		},
	}
	gen.Flags().IntVar(&nodes, "nodes", 10000, "nodes")
	gen.Flags().IntVar(&brcs, "brcs", 50, "trigger BRCs")
	gen.Flags().IntVar(&blocks, "blocks", 20, "blocks")
	gen.Flags().Int64Var(&seed, "seed", 1, "random seed (same seed, same files)")
	cmd.AddCommand(gen)
	return cmd
}
