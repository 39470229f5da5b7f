package gittest

import (
	"slices"
	"testing"
)

func TestHarnessRoundTrip(t *testing.T) {
	url := NewRemote(t, map[string]string{"a.txt": "one\n", "dir/b.txt": "bee\n"})
	first := Head(t, url)

	got := Push(t, url, map[string]string{"a.txt": "two\n", "c.txt": ""}, []string{"dir/b.txt"}, "Second change")
	if got == first || Head(t, url) != got {
		t.Fatalf("head after push = %s, pushed %s, first %s", Head(t, url), got, first)
	}

	tests := []struct {
		name   string
		path   string
		want   string
		exists bool
	}{
		{"a changed file has its new content", "a.txt", "two\n", true},
		{"an empty string writes an empty file", "c.txt", "", true},
		{"a deleted file is gone", "dir/b.txt", "", false},
		{"a never written file does not exist", "nope.txt", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			content, ok := ReadFile(t, url, tc.path)
			if ok != tc.exists || content != tc.want {
				t.Fatalf("ReadFile(%s) = %q, %v; want %q, %v", tc.path, content, ok, tc.want, tc.exists)
			}
		})
	}

	if log := Log(t, url); !slices.Equal(log, []string{"Second change", "Initial commit"}) {
		t.Fatalf("log = %q", log)
	}
}

func TestSuccessivePushesKeepEveryCommit(t *testing.T) {
	url := NewRemote(t, map[string]string{"a.txt": "one\n"})
	Push(t, url, map[string]string{"b.txt": "b\n"}, nil, "First")
	Push(t, url, map[string]string{"c.txt": "c\n"}, nil, "Second")
	if log := Log(t, url); !slices.Equal(log, []string{"Second", "First", "Initial commit"}) {
		t.Fatalf("log = %q", log)
	}
	if _, ok := ReadFile(t, url, "b.txt"); !ok {
		t.Fatal("b.txt lost")
	}
}
