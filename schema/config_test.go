package schema

import (
	"strings"
	"testing"
)

func TestValidateConfig(t *testing.T) {
	const sch = `{node: string, replicas: int & >=1 & <=5, password?: string & =~"^.{12,}$"}`
	tests := []struct {
		name, rendered, wantErr string
	}{
		{"a matching config passes", "node: a\nreplicas: 3\n", ""},
		{"a value out of bounds names the field", "node: a\nreplicas: 9\n", "replicas"},
		{"a missing field is refused", "replicas: 2\n", "node"},
		{"an unknown field is refused (closed struct)", "node: a\nreplicas: 2\nextra: 1\n", "extra"},
		{"a short secret is refused without printing it", "node: a\nreplicas: 2\npassword: hunter2\n", "password"},
		{"invalid YAML is refused", "node: [\n", "not valid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateConfig(sch, tt.rendered)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "9") {
				t.Fatalf("err prints a rendered value: %v", err)
			}
		})
	}
	if err := ValidateConfig("{a: int &", "a: 1\n"); err == nil || !strings.Contains(err.Error(), "does not compile") {
		t.Fatalf("a broken schema: %v", err)
	}
}
