package config

import (
	"strings"
	"testing"
)

// TestMinFreeMemoryMb: the memory guard's headroom defaults to 0 (off),
// takes any integer from 0 to MaxMinFreeMemoryMb and names itself when
// rejected.
func TestMinFreeMemoryMb(t *testing.T) {
	const model = `"models":[{"id":"a","family":"f","path":"p"}]`
	cfg, err := Parse([]byte(`{`+model+`}`), "/")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinFreeMemoryMb != 0 || Default().MinFreeMemoryMb != 0 {
		t.Fatalf("default min_free_memory_mb = %d, want 0 (guard off)", cfg.MinFreeMemoryMb)
	}
	for raw, want := range map[string]int64{"0": 0, "512": 512, "2.0": 2, "1073741824": MaxMinFreeMemoryMb} {
		cfg, err := Parse([]byte(`{"min_free_memory_mb":`+raw+`,`+model+`}`), "/")
		if err != nil {
			t.Fatalf("min_free_memory_mb %s: %v", raw, err)
		}
		if cfg.MinFreeMemoryMb != want {
			t.Errorf("min_free_memory_mb %s parsed as %d, want %d", raw, cfg.MinFreeMemoryMb, want)
		}
	}
	bad := map[string]string{
		"-1":         "min_free_memory_mb must be between 0 and 1073741824, got -1",
		"1073741825": "min_free_memory_mb must be between 0 and 1073741824",
		"1.5":        "min_free_memory_mb must be an integer, got 1.5",
		`"512"`:      "min_free_memory_mb must be a number, got a string",
		"true":       "min_free_memory_mb must be a number",
	}
	for raw, want := range bad {
		_, err := Parse([]byte(`{"min_free_memory_mb":`+raw+`,`+model+`}`), "/")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("min_free_memory_mb %s: err = %v, want one containing %q", raw, err, want)
		}
	}
}
