package config

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultsAndModel(t *testing.T) {
	cfg, err := Parse([]byte(`{"models":[{"id":"a","family":"f","path":"w/a.gguf",
		"load_options":{"n":1,"b":true,"s":"x"}}]}`), "/base")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "127.0.0.1" || cfg.Port != 8080 || cfg.Backend != "cpu" || cfg.BusyTimeoutMs != 300000 ||
		cfg.MaxRequestBodyBytes != 64<<20 || cfg.Threads != 1 || cfg.MaxInputChars != 100000 {
		t.Fatalf("defaults wrong: %+v", cfg)
	}
	m := cfg.Models[0]
	if m.Path != filepath.Join("/base", "w/a.gguf") || m.Task != "tts" || m.Mode != "offline" || m.Lazy {
		t.Fatalf("model wrong: %+v", m)
	}
	if m.LoadOptions["n"] != "1" || m.LoadOptions["b"] != "true" || m.LoadOptions["s"] != "x" {
		t.Fatalf("options not stringified: %v", m.LoadOptions)
	}
	if m.Slots.Set {
		t.Fatal("slots set without the key")
	}
	if n, err := m.Slots.Count(); n != 1 || err != nil {
		t.Fatalf("absent slots count = %d, %v", n, err)
	}
}

func TestLazyLoadAppliesWhereverWritten(t *testing.T) {
	cfg, err := Parse([]byte(`{"models":[{"id":"a","family":"f","path":"p"},{"id":"b","family":"f","path":"p","lazy":false}],"lazy_load":true}`), "/")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Models[0].Lazy || cfg.Models[1].Lazy {
		t.Fatalf("lazy = %v %v", cfg.Models[0].Lazy, cfg.Models[1].Lazy)
	}
}

func TestSlotsKeptRaw(t *testing.T) {
	valid := map[string]int{"1": 1, "16": 16, "4": 4}
	for raw, want := range valid {
		s := Slots{Set: true, Raw: raw}
		if n, err := s.Count(); err != nil || n != want {
			t.Errorf("slots %s: %d %v", raw, n, err)
		}
	}
	for _, raw := range []string{`"2"`, "true", "null", "1.5", "0", "17", "-1", "1e1", "[]"} {
		cfg, err := Parse([]byte(`{"models":[{"id":"a","family":"f","path":"p","slots":`+raw+`}]}`), "/")
		if err != nil {
			t.Fatalf("slots %s should parse (runtimes judge it): %v", raw, err)
		}
		s := cfg.Models[0].Slots
		if !s.Set || s.Raw != raw {
			t.Fatalf("slots %s kept as %+v", raw, s)
		}
		if _, err := s.Count(); err == nil {
			t.Errorf("slots %s accepted as a count", raw)
		}
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	cases := map[string]string{
		`{"models":[],"models":[]}`: `duplicate key "models"`,
		`{"modls":[]}`:              `unknown config key "modls"`,
		`{"models":[{"id":"a","family":"f","path":"p","x":1}]}`:                              `unknown model key "models[0].x"`,
		`{"models":[{"id":"a","family":"f","path":"p","id":"b"}]}`:                           `duplicate key "models[0].id"`,
		`{"port":0,"models":[{"id":"a","family":"f","path":"p"}]}`:                           `port must be between 1 and 65535`,
		`{"port":"80","models":[{"id":"a","family":"f","path":"p"}]}`:                        `port must be a number`,
		`{"busy_timeout_ms":1.5,"models":[{"id":"a","family":"f","path":"p"}]}`:              `busy_timeout_ms must be an integer`,
		`{"cors_origins":"x","models":[{"id":"a","family":"f","path":"p"}]}`:                 `cors_origins`,
		`{"models":[{"family":"f","path":"p"}]}`:                                             `models[0].id is required`,
		`{"models":[{"id":"a","path":"p"}]}`:                                                 `models[0].family is required`,
		`{"models":[{"id":"a","family":"f"}]}`:                                               `models[0].path is required`,
		`{"models":[{"id":"a","family":"f","path":"p","task":"dance"}]}`:                     `unknown task "dance"`,
		`{"models":[{"id":"a","family":"f","path":"p","mode":"live"}]}`:                      `mode must be`,
		`{"models":[{"id":"a","family":"f","path":"p"},{"id":"a","family":"f","path":"p"}]}`: `duplicate model id "a"`,
		`{"models":[{"id":"a","family":"f","path":"p","default_voice_preset":"x"}]}`:         `names preset "x"`,
		`{"models":[{"id":"a","family":"f","path":"p","voice_presets":{"v":{}}}]}`:           `needs at least one of`,
		`{"models":[{"id":"a","family":"f","path":"p","load_options":{"k":[1]}}]}`:           `option values must be`,
		`[1]`:          `config must be a JSON object`,
		`{"a":1} junk`: `unexpected data after`,
		`{`:            `invalid JSON`,
	}
	for in, want := range cases {
		_, err := Parse([]byte(in), "/")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestParseModelJSONForLoadRoute(t *testing.T) {
	m, err := ParseModelJSON([]byte(`{"id":"n","family":"fixture","path":"x.bin","slots":2,"session_options":{"fixture_capacity":2}}`), "/srv")
	if err != nil {
		t.Fatal(err)
	}
	if m.Path != "/srv/x.bin" || !m.Slots.Set || m.SessionOptions["fixture_capacity"] != "2" {
		t.Fatalf("%+v", m)
	}
	if _, err := ParseModelJSON([]byte(`{"id":"n","family":"fixture","path":"x","busy_timeout_ms":5}`), "/"); err == nil ||
		!strings.Contains(err.Error(), `unknown model key "busy_timeout_ms"`) {
		t.Fatalf("load route accepted a key it does not take: %v", err)
	}
}

func TestCloneIsDeep(t *testing.T) {
	bt := int64(5)
	m := Model{LoadOptions: map[string]string{"a": "1"}, BusyTimeoutMs: &bt, VoicePresets: map[string]VoicePreset{"v": {VoiceID: "x"}}}
	c := m.Clone()
	c.LoadOptions["a"] = "2"
	*c.BusyTimeoutMs = 9
	c.VoicePresets["v"] = VoicePreset{VoiceID: "y"}
	if m.LoadOptions["a"] != "1" || *m.BusyTimeoutMs != 5 || m.VoicePresets["v"].VoiceID != "x" {
		t.Fatal("Clone shares state with the original")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"models":[{"id":"a","family":"f","path":"p","slots":2,"load_options":{"k":1}}]}`))
	f.Add([]byte(`{"port":80,"port":81}`))
	f.Add([]byte(`{"models":[{"id":"a","family":"f","path":"p","voice_presets":{"v":{"voice_id":"x"}},"default_voice_preset":"v"}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, "/base")
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		ids := map[string]bool{}
		for _, m := range cfg.Models {
			if m.ID == "" || m.Family == "" || ids[m.ID] {
				t.Fatalf("invalid model accepted: %+v", m)
			}
			ids[m.ID] = true
			if m.Slots.Set {
				if n, err := m.Slots.Count(); err == nil && (n < 1 || n > MaxSlots) {
					t.Fatalf("slot count %d out of range accepted", n)
				}
			}
		}
		if cfg.Port < 1 || cfg.Port > 65535 || cfg.Threads < 1 {
			t.Fatalf("out-of-range settings accepted: %+v", cfg)
		}
	})
}
