// Package config reads the server's JSON configuration: top-level settings
// and model entries. It rejects unknown and duplicate keys by name, keeps
// whether `slots` was given at all (the runtimes decide what that means),
// and resolves relative paths against the config file's folder.
package config

import (
	_ "embed"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/audioproof/audioproof/server/session"
)

// Defaults that apply when a key is absent.
const (
	DefaultHost                = "127.0.0.1"
	DefaultPort                = 8080
	DefaultBackend             = "cpu"
	DefaultThreads             = 1
	DefaultBusyTimeoutMs       = 300000
	DefaultMaxRequestBodyBytes = 64 << 20
	DefaultMaxAudioSeconds     = 1800
	DefaultMaxInputChars       = 100000
	MaxSlots                   = 16
	// MaxMinFreeMemoryMb is the largest min_free_memory_mb accepted (1 PiB).
	MaxMinFreeMemoryMb = 1 << 30
)

// Config is the whole server configuration.
type Config struct {
	Host                string
	Port                int
	Backend             string
	Device              int
	Threads             int
	CORSOrigins         string // "" or "*"
	LazyLoad            bool
	BusyTimeoutMs       int64
	UI                  bool
	UIManagement        bool
	LogRequestBody      bool
	MaxRequestBodyBytes int64
	MaxAudioSeconds     float64
	MaxInputChars       int // longest text input (characters); 0 = no limit
	MaxLoadedModels     int
	IdleUnloadMs        int64
	// MinFreeMemoryMb is the memory guard's headroom in MiB: a load is
	// refused when its estimate plus this much exceeds the free memory.
	// 0 turns the guard off.
	MinFreeMemoryMb int64
	AudioRoots      []string // absolute folders server-local audio paths must lie under
	VoiceDir        string
	Models          []Model
	BaseDir         string // folder relative paths were resolved against
}

// Model is one model entry.
type Model struct {
	ID                    string
	Path                  string
	Family                string
	Task                  session.Task
	Mode                  session.Mode
	Lazy                  bool
	Slots                 Slots
	BusyTimeoutMs         *int64 // nil: inherit the server's
	Config                string
	Weight                string
	ModelSpecOverride     string
	LoadOptions           map[string]string
	SessionOptions        map[string]string
	DefaultRequestOptions map[string]string
	VoicePresets          map[string]VoicePreset
	DefaultVoicePreset    *VoicePreset
}

// VoicePreset names a voice by id, reference audio or both.
type VoicePreset struct {
	VoiceID       string `json:"voice_id,omitempty"`
	VoiceRef      string `json:"voice_ref,omitempty"`
	ReferenceText string `json:"reference_text,omitempty"`
}

// Slots records the `slots` key exactly as given. Set is false when the key
// was absent; Raw is its JSON text otherwise (even "null").
type Slots struct {
	Set bool
	Raw string
}

var slotsInteger = regexp.MustCompile(`^-?[0-9]+$`)

// Count validates an explicit slot count: a JSON integer 1..16. An absent
// key means one slot.
func (s Slots) Count() (int, error) {
	if !s.Set {
		return 1, nil
	}
	if !slotsInteger.MatchString(s.Raw) {
		return 0, fmt.Errorf("slots must be a JSON integer from 1 to %d, got %s", MaxSlots, s.Raw)
	}
	n, err := strconv.Atoi(s.Raw)
	if err != nil || n < 1 || n > MaxSlots {
		return 0, fmt.Errorf("slots must be a JSON integer from 1 to %d, got %s", MaxSlots, s.Raw)
	}
	return n, nil
}

// Spec is the part of the entry a family loads from.
func (m *Model) Spec() session.Spec {
	return session.Spec{
		ID: m.ID, Family: m.Family, Path: m.Path, Task: m.Task, Mode: m.Mode,
		Config: m.Config, Weight: m.Weight,
		LoadOptions: m.LoadOptions, SessionOptions: m.SessionOptions,
	}
}

// Clone returns a deep copy, so that runtimes can keep entries immutable.
func (m Model) Clone() Model {
	if m.BusyTimeoutMs != nil {
		v := *m.BusyTimeoutMs
		m.BusyTimeoutMs = &v
	}
	m.LoadOptions = cloneMap(m.LoadOptions)
	m.SessionOptions = cloneMap(m.SessionOptions)
	m.DefaultRequestOptions = cloneMap(m.DefaultRequestOptions)
	if m.VoicePresets != nil {
		p := make(map[string]VoicePreset, len(m.VoicePresets))
		for k, v := range m.VoicePresets {
			p[k] = v
		}
		m.VoicePresets = p
	}
	if m.DefaultVoicePreset != nil {
		v := *m.DefaultVoicePreset
		m.DefaultVoicePreset = &v
	}
	return m
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Default returns the configuration with every default and no models.
func Default() *Config {
	return &Config{
		Host: DefaultHost, Port: DefaultPort, Backend: DefaultBackend, Threads: DefaultThreads,
		BusyTimeoutMs: DefaultBusyTimeoutMs, UI: true, MaxRequestBodyBytes: DefaultMaxRequestBodyBytes,
		MaxAudioSeconds: DefaultMaxAudioSeconds, MaxInputChars: DefaultMaxInputChars,
	}
}

// Load reads and parses a config file; relative paths resolve against its folder.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	cfg, err := Parse(data, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse parses config JSON. baseDir is where relative paths resolve.
func Parse(data []byte, baseDir string) (*Config, error) {
	root, err := parseTree(data)
	if err != nil {
		return nil, err
	}
	if root.kind != 'o' {
		return nil, fmt.Errorf("config must be a JSON object, got %s", kindName(root.kind))
	}
	cfg := Default()
	cfg.BaseDir = baseDir
	r := reader{path: ""}
	// lazy_load is the default for every model's `lazy`, wherever it is written.
	if v, ok := root.fields["lazy_load"]; ok {
		cfg.LazyLoad = r.boolean("lazy_load", v)
	}
	for _, key := range root.keys {
		v := root.fields[key]
		switch key {
		case "host":
			cfg.Host = r.str(key, v)
		case "port":
			cfg.Port = int(r.intRange(key, v, 1, 65535))
		case "backend":
			cfg.Backend = r.str(key, v)
		case "device":
			cfg.Device = int(r.intRange(key, v, 0, math.MaxInt32))
		case "threads":
			cfg.Threads = int(r.intRange(key, v, 1, 1024))
		case "cors_origins":
			cfg.CORSOrigins = r.str(key, v)
		case "lazy_load":
			cfg.LazyLoad = r.boolean(key, v)
		case "busy_timeout_ms":
			cfg.BusyTimeoutMs = r.intRange(key, v, 0, 1<<53-1)
		case "ui":
			cfg.UI = r.boolean(key, v)
		case "ui_management":
			cfg.UIManagement = r.boolean(key, v)
		case "log_request_body":
			cfg.LogRequestBody = r.boolean(key, v)
		case "max_request_body_bytes":
			cfg.MaxRequestBodyBytes = r.intRange(key, v, 0, 1<<53-1)
		case "max_audio_seconds":
			cfg.MaxAudioSeconds = r.number(key, v, 0, 1e9)
		case "max_input_chars":
			cfg.MaxInputChars = int(r.intRange(key, v, 0, math.MaxInt32))
		case "max_loaded_models":
			cfg.MaxLoadedModels = int(r.intRange(key, v, 0, math.MaxInt32))
		case "idle_unload_ms":
			cfg.IdleUnloadMs = r.intRange(key, v, 0, 1<<53-1)
		case "min_free_memory_mb":
			cfg.MinFreeMemoryMb = r.intRange(key, v, 0, MaxMinFreeMemoryMb)
		case "audio_roots":
			for i, item := range r.array(key, v) {
				p := r.str(fmt.Sprintf("%s[%d]", key, i), item)
				if p == "" {
					r.fail("%s[%d] must not be empty", key, i)
					continue
				}
				cfg.AudioRoots = append(cfg.AudioRoots, resolve(baseDir, p))
			}
		case "voice_dir":
			if s := r.str(key, v); s != "" {
				cfg.VoiceDir = resolve(baseDir, s)
			}
		case "models":
			for i, item := range r.array(key, v) {
				m, err := parseModel(item, fmt.Sprintf("models[%d]", i), baseDir, configKeys, cfg.LazyLoad)
				if err != nil {
					return nil, err
				}
				cfg.Models = append(cfg.Models, m)
			}
		default:
			r.fail("unknown config key %q", key)
		}
		if r.err != nil {
			return nil, r.err
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (c *Config) validate() error {
	if c.CORSOrigins != "" && c.CORSOrigins != "*" {
		return fmt.Errorf("cors_origins must be \"*\" or \"\", got %q", c.CORSOrigins)
	}
	if err := ValidateBackend(c.Backend); err != nil {
		return err
	}
	if err := ValidateHost(c.Host); err != nil {
		return err
	}
	if len(c.Models) == 0 && !c.UIManagement {
		return fmt.Errorf("models must list at least one model (or enable ui_management)")
	}
	seen := map[string]bool{}
	for _, m := range c.Models {
		if seen[m.ID] {
			return fmt.Errorf("duplicate model id %q", m.ID)
		}
		seen[m.ID] = true
	}
	return nil
}

// ValidateBackend accepts the backends the server can select.
func ValidateBackend(b string) error {
	switch b {
	case "cpu", "vulkan", "cuda":
		return nil
	case "best":
		return fmt.Errorf("backend \"best\" is not supported: choose cpu, vulkan or cuda")
	}
	return fmt.Errorf("unknown backend %q: choose cpu, vulkan or cuda", b)
}

// ValidateHost requires an IPv4 literal.
func ValidateHost(h string) error {
	parts := strings.Split(h, ".")
	if len(parts) != 4 {
		return fmt.Errorf("host must be an IPv4 address such as 127.0.0.1, got %q", h)
	}
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 255 || (len(p) > 1 && p[0] == '0') {
			return fmt.Errorf("host must be an IPv4 address such as 127.0.0.1, got %q", h)
		}
	}
	return nil
}

func resolve(base, p string) string {
	if filepath.IsAbs(p) || base == "" {
		return filepath.Clean(p)
	}
	return filepath.Join(base, p)
}

// keySet lists the keys a model entry may have in a context.
type keySet []string

var configKeys = keySet{"id", "path", "family", "task", "mode", "lazy", "slots", "busy_timeout_ms",
	"config", "weight", "load_options", "session_options", "default_request_options",
	"model_spec_override", "voice_presets", "default_voice_preset"}

// LoadRouteKeys are the keys POST /v1/models/load accepts.
var LoadRouteKeys = keySet{"id", "path", "family", "task", "mode", "slots", "model_spec_override",
	"config", "weight", "load_options", "session_options"}

// ParseModelJSON parses one model entry given to POST /v1/models/load.
// Relative paths resolve against baseDir.
func ParseModelJSON(data []byte, baseDir string) (Model, error) {
	root, err := parseTree(data)
	if err != nil {
		return Model{}, err
	}
	return parseModel(root, "", baseDir, LoadRouteKeys, false)
}

func parseModel(n *node, path, baseDir string, allowed keySet, lazyDefault bool) (Model, error) {
	r := reader{path: path}
	if n.kind != 'o' {
		return Model{}, r.errorf("%s must be an object, got %s", orBody(path), kindName(n.kind))
	}
	m := Model{Task: session.TaskTTS, Mode: session.ModeOffline, Lazy: lazyDefault}
	for _, key := range n.keys {
		v := n.fields[key]
		if !slices.Contains(allowed, key) {
			r.fail("unknown model key %q", r.at(key))
			break
		}
		switch key {
		case "id":
			m.ID = r.str(key, v)
		case "path":
			if p := r.str(key, v); p != "" {
				m.Path = resolve(baseDir, p)
			}
		case "family":
			m.Family = r.str(key, v)
		case "task":
			m.Task = session.Task(r.str(key, v))
			if r.err == nil && !slices.Contains(session.ValidTasks, m.Task) {
				r.fail("%s: unknown task %q", r.at(key), m.Task)
			}
		case "mode":
			m.Mode = session.Mode(r.str(key, v))
			if r.err == nil && m.Mode != session.ModeOffline && m.Mode != session.ModeStreaming {
				r.fail("%s must be \"offline\" or \"streaming\", got %q", r.at(key), m.Mode)
			}
		case "lazy":
			m.Lazy = r.boolean(key, v)
		case "slots":
			m.Slots = Slots{Set: true, Raw: v.raw()}
		case "busy_timeout_ms":
			t := r.intRange(key, v, 0, 1<<53-1)
			m.BusyTimeoutMs = &t
		case "config":
			m.Config = r.str(key, v)
		case "weight":
			m.Weight = r.str(key, v)
		case "model_spec_override":
			if s := r.str(key, v); s != "" {
				m.ModelSpecOverride = resolve(baseDir, s)
			}
		case "load_options":
			m.LoadOptions = r.options(key, v)
		case "session_options":
			m.SessionOptions = r.options(key, v)
		case "default_request_options":
			m.DefaultRequestOptions = r.options(key, v)
		case "voice_presets":
			m.VoicePresets = map[string]VoicePreset{}
			for _, name := range r.object(key, v).keys {
				if name == "" {
					r.fail("%s: a preset name must not be empty", r.at(key))
					break
				}
				m.VoicePresets[name] = r.preset(key+"."+name, v.fields[name])
			}
		case "default_voice_preset":
			if v.kind == 's' {
				m.DefaultVoicePreset = &VoicePreset{VoiceID: "\x00preset:" + v.str}
			} else {
				p := r.preset(key, v)
				m.DefaultVoicePreset = &p
			}
		}
		if r.err != nil {
			break
		}
	}
	if r.err != nil {
		return Model{}, r.err
	}
	for _, req := range []struct{ key, val string }{{"id", m.ID}, {"family", m.Family}} {
		if req.val == "" {
			return Model{}, r.errorf("%s is required and must be a non-empty string", r.at(req.key))
		}
	}
	if _, has := n.fields["path"]; !has {
		return Model{}, r.errorf("%s is required", r.at("path"))
	}
	if m.DefaultVoicePreset != nil && strings.HasPrefix(m.DefaultVoicePreset.VoiceID, "\x00preset:") {
		name := strings.TrimPrefix(m.DefaultVoicePreset.VoiceID, "\x00preset:")
		p, ok := m.VoicePresets[name]
		if !ok {
			return Model{}, r.errorf("%s names preset %q, which voice_presets does not define", r.at("default_voice_preset"), name)
		}
		m.DefaultVoicePreset = &p
	}
	return m, nil
}

func orBody(path string) string {
	if path == "" {
		return "the model entry"
	}
	return path
}

// reader collects the first error while reading typed values.
type reader struct {
	path string
	err  error
}

func (r *reader) at(key string) string { return joinPath(r.path, key) }

func (r *reader) errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) want(key string, v *node, kind byte) bool {
	if v.kind != kind {
		r.fail("%s must be %s, got %s", r.at(key), kindName(kind), kindName(v.kind))
		return false
	}
	return true
}

func (r *reader) str(key string, v *node) string {
	if r.want(key, v, 's') {
		return v.str
	}
	return ""
}

func (r *reader) boolean(key string, v *node) bool {
	if r.want(key, v, 'b') {
		return v.b
	}
	return false
}

func (r *reader) array(key string, v *node) []*node {
	if r.want(key, v, 'a') {
		return v.items
	}
	return nil
}

func (r *reader) object(key string, v *node) *node {
	if r.want(key, v, 'o') {
		return v
	}
	return &node{kind: 'o', fields: map[string]*node{}}
}

func (r *reader) intRange(key string, v *node, lo, hi int64) int64 {
	if !r.want(key, v, 'n') {
		return 0
	}
	n, err := strconv.ParseInt(v.str, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(v.str, 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			r.fail("%s must be an integer, got %s", r.at(key), v.str)
			return 0
		}
		n = int64(f)
	}
	if n < lo || n > hi {
		r.fail("%s must be between %d and %d, got %s", r.at(key), lo, hi, v.str)
	}
	return n
}

func (r *reader) number(key string, v *node, lo, hi float64) float64 {
	if !r.want(key, v, 'n') {
		return 0
	}
	f, err := strconv.ParseFloat(v.str, 64)
	if err != nil || f < lo || f > hi {
		r.fail("%s must be a number between %g and %g, got %s", r.at(key), lo, hi, v.str)
	}
	return f
}

// options reads an object whose values are stringified (strings as they are,
// numbers as written, booleans as true/false).
func (r *reader) options(key string, v *node) map[string]string {
	obj := r.object(key, v)
	out := make(map[string]string, len(obj.keys))
	for _, k := range obj.keys {
		s, err := Stringify(obj.fields[k])
		if err != nil {
			r.fail("%s.%s: %v", r.at(key), k, err)
			break
		}
		out[k] = s
	}
	return out
}

// Stringify turns a scalar option value into its string form.
func Stringify(v *node) (string, error) {
	switch v.kind {
	case 's', 'n':
		return v.str, nil
	case 'b':
		return strconv.FormatBool(v.b), nil
	}
	return "", fmt.Errorf("option values must be strings, numbers or booleans, got %s", kindName(v.kind))
}

func (r *reader) preset(key string, v *node) VoicePreset {
	obj := r.object(key, v)
	var p VoicePreset
	for _, k := range obj.keys {
		switch k {
		case "voice_id":
			p.VoiceID = r.str(key+"."+k, obj.fields[k])
		case "voice_ref":
			p.VoiceRef = r.str(key+"."+k, obj.fields[k])
		case "reference_text":
			p.ReferenceText = r.str(key+"."+k, obj.fields[k])
		default:
			r.fail("unknown voice preset key %q", r.at(key+"."+k))
		}
	}
	if r.err == nil && p == (VoicePreset{}) {
		r.fail("%s needs at least one of voice_id, voice_ref, reference_text", r.at(key))
	}
	return p
}
