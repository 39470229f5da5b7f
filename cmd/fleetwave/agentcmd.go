package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/agent"
)

// agentFlags are the command line of `fleetwave agent`.
type agentFlags struct {
	config, hub, node, tokenFile, stateDir string
	capabilities, addresses                []string
}

func agentCmd(newLogger func(zerolog.Level, bool) zerolog.Logger) *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent (--config FILE | --hub URL --node ID --token-file F --state-dir D)",
		Short: "Run one node's agent",
		Long: `Run one node's agent.

The settings come from --config FILE (YAML: hub, node, token_file, state_dir,
capabilities, addresses, poll_wait, report_interval, upgrade_timeout, shell)
and from flags; a flag given on the command line overrides the file's value
(--capability replaces the file's list, --address sets one name).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, tokenFile, err := agentConfig(cmd.Flags(), f)
			if err != nil {
				return err
			}
			if os.Getenv(agent.DemoBuildEnv) == "1" {
				if err := useDemoBuildVersion(); err != nil {
					return err
				}
			}
			token, err := agent.ReadTokenFile(tokenFile)
			if err != nil {
				return err
			}
			cfg.Token = token
			cfg.Logger = newLogger(zerolog.InfoLevel, false) // the agent names its node on each line
			cfg.SelfUpgrade = true                           // this process is the agent: the built-in upgrade may replace it
			return agent.Run(cmd.Context(), cfg)
		},
	}
	bindAgentFlags(cmd, &f)
	return cmd
}

func bindAgentFlags(cmd *cobra.Command, f *agentFlags) {
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "agent configuration file (YAML); flags given override it")
	fl.StringVar(&f.hub, "hub", "", "hub URL")
	fl.StringVar(&f.node, "node", "", "node id")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding this node's bearer token")
	fl.StringVar(&f.stateDir, "state-dir", "", "directory for the agent's state and block instances")
	fl.StringSliceVar(&f.capabilities, "capability", nil, "capability this node advertises (repeatable; replaces the file's list)")
	fl.StringSliceVar(&f.addresses, "address", nil, "data address name=value (repeatable; overrides that name of the file's)")
}

// agentConfig merges the configuration file (when given) and the flags
// given on the command line, which win; it returns the agent's Config
// (without its token) and the token file.
func agentConfig(fl interface{ Changed(string) bool }, f agentFlags) (agent.Config, string, error) {
	var fc agent.FileConfig
	if f.config != "" {
		var err error
		if fc, err = agent.LoadConfigFile(f.config); err != nil {
			return agent.Config{}, "", err
		}
	}
	set := fl.Changed
	for _, o := range []struct {
		flag string
		v    string
		dst  *string
	}{{"hub", f.hub, &fc.Hub}, {"node", f.node, &fc.Node}, {"token-file", f.tokenFile, &fc.TokenFile}, {"state-dir", f.stateDir, &fc.StateDir}} {
		if set(o.flag) {
			*o.dst = o.v
		}
	}
	if set("capability") {
		fc.Capabilities = f.capabilities
	}
	if set("address") {
		if fc.Addresses == nil {
			fc.Addresses = map[string]string{}
		}
		for _, a := range f.addresses {
			k, v, ok := strings.Cut(a, "=")
			if !ok || k == "" || v == "" {
				return agent.Config{}, "", usageError{fmt.Sprintf("--address %q: want name=value", a), "--address shuffle=10.0.0.5:7077"}
			}
			fc.Addresses[k] = v
		}
	}
	var missing []string
	for _, m := range []struct{ name, v string }{{"hub", fc.Hub}, {"node", fc.Node}, {"token-file", fc.TokenFile}, {"state-dir", fc.StateDir}} {
		if m.v == "" {
			missing = append(missing, "--"+m.name)
		}
	}
	if len(missing) > 0 {
		where := "flags"
		if f.config != "" {
			where = f.config + " or flags"
		}
		return agent.Config{}, "", usageError{
			fmt.Sprintf("agent needs %s (from %s)", strings.Join(missing, ", "), where),
			"fleetwave agent --config /etc/fleetwave/agent.yaml, or fleetwave agent --hub http://127.0.0.1:8080 --node edge-01 --token-file token --state-dir state",
		}
	}
	return agent.Config{
		HubURL:         fc.Hub,
		Node:           fc.Node,
		StateDir:       fc.StateDir,
		Capabilities:   fc.Capabilities,
		DataAddresses:  fc.Addresses,
		PollWait:       fc.PollWait,
		ReportInterval: fc.ReportInterval,
		UpgradeTimeout: fc.UpgradeTimeout,
		Shell:          fc.Shell,
	}, fc.TokenFile, nil
}

// useDemoBuildVersion makes this process report the version its binary's
// demo-build trailer names (agent.WriteDemoBuild): `fleetwave demo` sets
// agent.DemoBuildEnv for the agents it runs as processes, so that one
// binary can play two versions in its agent upgrade.
func useDemoBuildVersion() error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%s: %w", agent.DemoBuildEnv, err)
	}
	v, ok, err := agent.DemoBuildVersion(exe)
	if err != nil {
		return fmt.Errorf("%s: %w", agent.DemoBuildEnv, err)
	}
	if ok {
		fleetwave.Version = v
	}
	return nil
}
