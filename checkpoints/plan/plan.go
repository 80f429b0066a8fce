// Package plan reads checkpoint plans: versioned JSON files naming the
// variants (server commands), backends, models, inputs and steps of a parity
// run, and renders each variant's server config from the plan's models.
package plan

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/audioproof/audioproof/checkpoints/compare"
)

// Version is the plan format version this package reads.
const Version = 1

// Sources of a variant's binary.
const (
	SourceWorktree = "worktree" // go build in the working tree
	SourceRef      = "ref"      // checked out from a git ref with go-git, built there
	SourceBinary   = "binary"   // an existing executable (e.g. audiocpp_server)
)

// Runtimes a variant is expected to select.
const (
	RuntimeLegacy   = "legacy"
	RuntimeParallel = "parallel"
)

// Step names.
const (
	StepCold   = "cold"
	StepWarm   = "warm"
	StepUnload = "unload"
	StepReload = "reload"
)

// BackendAuto in Backends means: CPU always, Vulkan and CUDA where visible.
const BackendAuto = "auto"

// ErrBadPlan marks plan errors (exit status 2).
var ErrBadPlan = errors.New("bad plan")

// Plan is a checkpoint plan file.
type Plan struct {
	Version     int    `json:"version"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Reference names the variant every other variant must equal.
	Reference string `json:"reference"`
	// Base is the git ref that variants with source "ref" and no ref of
	// their own build from (overridden by --base).
	Base string `json:"base,omitempty"`
	// Backends lists "cpu", "vulkan", "cuda" or "auto".
	Backends []string `json:"backends"`
	// BackendEnv adds environment variables per backend.
	BackendEnv map[string]map[string]string `json:"backend_env,omitempty"`
	// Server holds the top-level config keys written for every variant
	// (for instance ui_management, busy_timeout_ms) and harness timeouts.
	Server Server `json:"server"`
	// Tolerance is for comparisons across backends.
	Tolerance CrossTolerance `json:"tolerance"`
	Models    []Model        `json:"models,omitempty"`
	// ModelsFrom adds the models of a server config file.
	ModelsFrom *ModelsFrom `json:"models_from,omitempty"`
	Variants   []Variant   `json:"variants"`
	// Steps per model, in order: cold, warm, unload, reload.
	Steps []string `json:"steps"`
	// WarningText is what the experimental-scope warning contains.
	WarningText string `json:"warning_text"`

	// Dir is where the plan's relative paths resolve (the plan file's
	// folder; the repository root for built-in plans).
	Dir string `json:"-"`
	// Source is the plan file path, or "builtin:<name>".
	Source string `json:"-"`
	// Raw is the plan as read, stored in the evidence.
	Raw []byte `json:"-"`
}

// Server settings.
type Server struct {
	Config          map[string]json.RawMessage `json:"config,omitempty"`
	ReadyTimeoutMs  int                        `json:"ready_timeout_ms"`
	RequestTimeout  int                        `json:"request_timeout_ms"`
	ShutdownTimeout int                        `json:"shutdown_timeout_ms"`
	// DrainTimeoutMs is how long the slot counters may take to drain after
	// a response has been received (a lease is released just after the
	// response is written); default 2000.
	DrainTimeoutMs int `json:"drain_timeout_ms"`
	// ExitStatuses are the exit statuses that count as a clean shutdown
	// after SIGTERM (default [0]).
	ExitStatuses []int `json:"clean_exit_statuses,omitempty"`
}

// CrossTolerance is the cross-backend tolerance and whether it is required.
type CrossTolerance struct {
	compare.Tolerance
	Required bool `json:"required"`
}

// Model is one model entry plus the request that exercises it.
type Model struct {
	ID     string `json:"id"`
	Family string `json:"family"`
	Task   string `json:"task,omitempty"`
	Mode   string `json:"mode,omitempty"`
	Path   string `json:"path"`
	// Entry holds further model-entry keys written as given (lazy,
	// session_options, default_request_options, ...). Not id/family/
	// task/mode/path/slots.
	Entry map[string]json.RawMessage `json:"entry,omitempty"`
	// Requires lists files that must exist (weights); a missing one fails
	// the run with a message naming the file.
	Requires []string `json:"requires,omitempty"`
	Request  Request  `json:"request"`
}

// Request is what every inference step sends.
type Request struct {
	Method string `json:"method,omitempty"` // POST by default
	Path   string `json:"path"`
	// JSON is sent as application/json; "model" is set to the model id when absent.
	JSON json.RawMessage `json:"json,omitempty"`
	// Multipart fields and files (field -> file path) are sent as
	// multipart/form-data; the "model" field is added when absent.
	Fields map[string]string `json:"fields,omitempty"`
	Files  map[string]string `json:"files,omitempty"`
}

// ModelsFrom takes models from a server config file (for instance the
// server's default config), so that a new real model family cannot be left
// out of the default plan silently: every family must have a request.
type ModelsFrom struct {
	Config string `json:"config"`
	// BaseDir is where the config's relative paths resolve (plan-relative;
	// default: the config's folder).
	BaseDir         string             `json:"base_dir,omitempty"`
	ExcludeFamilies []string           `json:"exclude_families,omitempty"`
	Requests        map[string]Request `json:"requests"`
}

// Variant is one server command.
type Variant struct {
	Name  string `json:"name"`
	Build Build  `json:"build"`
	// Args come after the standard flags (--config, --host, --port,
	// --backend). With standard_flags false, Args are the whole argument
	// list and may use {config}, {host}, {port} and {backend}.
	Args          []string          `json:"args,omitempty"`
	StandardFlags *bool             `json:"standard_flags,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	// Slots is written into every model entry as given; absent = omitted.
	Slots json.RawMessage `json:"slots,omitempty"`
	// Runtime is legacy or parallel; default parallel when Args contain
	// --parallel-jobs. It decides the /v1/models schema and whether the
	// warning is required (parallel) or forbidden (legacy).
	Runtime string `json:"runtime,omitempty"`
	// ModelEntry keys are merged into every model entry (a way to plant a
	// difference, e.g. default_request_options or another path).
	ModelEntry map[string]json.RawMessage `json:"model_entry,omitempty"`
	// Config keys are merged into the top level of the config.
	Config map[string]json.RawMessage `json:"config,omitempty"`
}

// Build says where a variant's binary comes from.
type Build struct {
	Source  string `json:"source"`            // worktree, ref, binary
	Ref     string `json:"ref,omitempty"`     // for ref; default: the plan's base
	Package string `json:"package,omitempty"` // go package to build, default ./server
	Path    string `json:"path,omitempty"`    // for binary
}

// Runtime returns the variant's runtime.
func (v *Variant) RuntimeName() string {
	if v.Runtime != "" {
		return v.Runtime
	}
	if slices.Contains(v.Args, "--parallel-jobs") {
		return RuntimeParallel
	}
	return RuntimeLegacy
}

// UsesStandardFlags reports whether the harness adds --config/--host/--port/--backend.
func (v *Variant) UsesStandardFlags() bool { return v.StandardFlags == nil || *v.StandardFlags }

// SlotsText is how the slots setting is shown: "omitted" or the JSON.
func (v *Variant) SlotsText() string {
	if v.Slots == nil {
		return "omitted"
	}
	return string(v.Slots)
}

// Load reads a plan file, or a built-in plan by name ("default"); repoRoot
// is where a built-in plan's relative paths resolve.
func Load(nameOrPath, repoRoot string) (*Plan, error) {
	if data, ok := builtin[nameOrPath]; ok {
		p, err := Parse(data, repoRoot)
		if err != nil {
			return nil, fmt.Errorf("built-in plan %s: %w", nameOrPath, err)
		}
		p.Source = "builtin:" + nameOrPath
		return p, nil
	}
	data, err := os.ReadFile(nameOrPath)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot read plan %s (built-in plans: %s): %v", ErrBadPlan, nameOrPath, strings.Join(BuiltinNames(), ", "), err)
	}
	abs, _ := filepath.Abs(nameOrPath)
	p, err := Parse(data, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", nameOrPath, err)
	}
	p.Source = abs
	return p, nil
}

//go:embed default.json
var defaultPlan []byte

var builtin = map[string][]byte{"default": defaultPlan}

// BuiltinNames lists the built-in plans.
func BuiltinNames() []string { return []string{"default"} }

// Builtin returns a built-in plan's JSON.
func Builtin(name string) ([]byte, bool) {
	b, ok := builtin[name]
	return b, ok
}

// Parse parses and validates plan JSON; dir is where relative paths resolve.
// Errors wrap ErrBadPlan.
func Parse(data []byte, dir string) (*Plan, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPlan, err)
	}
	p.Dir = dir
	p.Raw = data
	if err := p.expandModelsFrom(); err != nil {
		return nil, err
	}
	p.defaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

func (p *Plan) defaults() {
	if p.Reference == "" {
		p.Reference = "upstream"
	}
	if len(p.Backends) == 0 {
		p.Backends = []string{BackendAuto}
	}
	if len(p.Steps) == 0 {
		p.Steps = []string{StepCold, StepWarm, StepWarm, StepUnload, StepReload}
	}
	if p.Server.ReadyTimeoutMs == 0 {
		p.Server.ReadyTimeoutMs = 60000
	}
	if p.Server.RequestTimeout == 0 {
		p.Server.RequestTimeout = 120000
	}
	if p.Server.ShutdownTimeout == 0 {
		p.Server.ShutdownTimeout = 15000
	}
	if p.Server.DrainTimeoutMs == 0 {
		p.Server.DrainTimeoutMs = 2000
	}
	if len(p.Server.ExitStatuses) == 0 {
		p.Server.ExitStatuses = []int{0}
	}
	if p.WarningText == "" {
		p.WarningText = "--parallel-jobs is experimental"
	}
	for i := range p.Variants {
		b := &p.Variants[i].Build
		if b.Package == "" {
			b.Package = "./server"
		}
		// A binary path with a slash is plan-relative; a bare name is looked up in PATH.
		if b.Source == SourceBinary && strings.Contains(b.Path, "/") {
			b.Path = p.Resolve(b.Path)
		}
	}
	for i := range p.Models {
		if p.Models[i].Request.Method == "" {
			p.Models[i].Request.Method = "POST"
		}
	}
}

var reservedEntryKeys = []string{"id", "family", "task", "mode", "path", "slots"}

// Validate checks the plan and reports every problem at once.
func (p *Plan) Validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if p.Version != Version {
		bad("version must be %d, got %d", Version, p.Version)
	}
	if p.Name == "" {
		bad("name is required")
	}
	for _, b := range p.Backends {
		switch b {
		case "cpu", "vulkan", "cuda", BackendAuto:
		default:
			bad("backends: unknown backend %q (use cpu, vulkan, cuda or auto)", b)
		}
	}
	if p.Tolerance.Abs < 0 || p.Tolerance.Rel < 0 {
		bad("tolerance abs and rel must not be negative")
	}
	if len(p.Models) == 0 {
		bad("models must list at least one model")
	}
	ids := map[string]bool{}
	for i, m := range p.Models {
		at := fmt.Sprintf("models[%d]", i)
		if m.ID == "" || m.Family == "" || m.Path == "" {
			bad("%s: id, family and path are required", at)
		}
		if ids[m.ID] {
			bad("%s: duplicate model id %q", at, m.ID)
		}
		ids[m.ID] = true
		for k := range m.Entry {
			if slices.Contains(reservedEntryKeys, k) {
				bad("%s.entry: %q is set by the plan or the variant, not in entry", at, k)
			}
		}
		if !strings.HasPrefix(m.Request.Path, "/") {
			bad("%s.request.path must be an absolute URL path such as /v1/audio/speech", at)
		}
		if m.Request.JSON != nil && (len(m.Request.Fields) > 0 || len(m.Request.Files) > 0) {
			bad("%s.request: give json or multipart fields/files, not both", at)
		}
		if m.Request.JSON != nil {
			var obj map[string]any
			if err := json.Unmarshal(m.Request.JSON, &obj); err != nil {
				bad("%s.request.json must be a JSON object: %v", at, err)
			}
		}
	}
	if len(p.Variants) == 0 {
		bad("variants must list at least one variant")
	}
	names := map[string]bool{}
	for i, v := range p.Variants {
		at := fmt.Sprintf("variants[%d] (%s)", i, v.Name)
		if v.Name == "" || strings.ContainsAny(v.Name, "/\\ ") {
			bad("variants[%d]: name is required and must not contain spaces or slashes", i)
		}
		if names[v.Name] {
			bad("%s: duplicate variant name", at)
		}
		names[v.Name] = true
		switch v.Build.Source {
		case SourceWorktree:
		case SourceRef:
			if v.Build.Ref == "" && p.Base == "" {
				bad("%s: source ref needs build.ref or the plan's base", at)
			}
		case SourceBinary:
			if v.Build.Path == "" {
				bad("%s: source binary needs build.path", at)
			}
		default:
			bad("%s: build.source must be worktree, ref or binary, got %q", at, v.Build.Source)
		}
		if v.Runtime != "" && v.Runtime != RuntimeLegacy && v.Runtime != RuntimeParallel {
			bad("%s: runtime must be legacy or parallel", at)
		}
		if v.Slots != nil && !json.Valid(v.Slots) {
			bad("%s: slots is not valid JSON", at)
		}
		for k := range v.ModelEntry {
			if k != "path" && slices.Contains(reservedEntryKeys, k) {
				bad("%s.model_entry: %q cannot be overridden here", at, k)
			}
		}
	}
	if len(p.Variants) > 0 && !names[p.Reference] {
		bad("reference variant %q is not among the variants", p.Reference)
	}
	seenUnload := false
	for i, s := range p.Steps {
		switch s {
		case StepCold:
			if i != 0 {
				bad("steps: cold must be the first step")
			}
		case StepWarm:
		case StepUnload:
			seenUnload = true
		case StepReload:
			if !seenUnload {
				bad("steps: reload must come after unload")
			}
		default:
			bad("steps: unknown step %q (use cold, warm, unload, reload)", s)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrBadPlan, strings.Join(errs, "; "))
	}
	return nil
}

// Resolve makes a plan-relative path absolute.
func (p *Plan) Resolve(path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(p.Dir, path)
}

// TableSteps returns every exchange label in the order a run makes them:
// the steps, with the model list around each unload, and the final list.
func (p *Plan) TableSteps() []string {
	var out []string
	for _, s := range p.StepNames() {
		if s == StepUnload {
			out = append(out, s+"-before", s, s+"-after")
			continue
		}
		out = append(out, s)
	}
	return append(out, "models")
}

// StepNames returns the step labels in order: cold, warm1, warm2, unload, reload.
func (p *Plan) StepNames() []string {
	out := make([]string, len(p.Steps))
	warm := 0
	for i, s := range p.Steps {
		out[i] = s
		if s == StepWarm {
			warm++
			out[i] = fmt.Sprintf("warm%d", warm)
		}
	}
	return out
}

// RenderConfig writes the server config for a variant: the plan's server
// config keys, ui_management on (unload needs it), the variant's config
// keys, and every model with the variant's slots and model_entry keys.
func (p *Plan) RenderConfig(v *Variant) ([]byte, error) {
	top := map[string]json.RawMessage{"ui_management": json.RawMessage("true")}
	for k, val := range p.Server.Config {
		top[k] = val
	}
	for k, val := range v.Config {
		top[k] = val
	}
	models := make([]map[string]json.RawMessage, 0, len(p.Models))
	for _, m := range p.Models {
		e := map[string]json.RawMessage{}
		str := func(k, s string) {
			if s != "" {
				b, _ := json.Marshal(s)
				e[k] = b
			}
		}
		str("id", m.ID)
		str("family", m.Family)
		str("task", m.Task)
		str("mode", m.Mode)
		str("path", p.Resolve(m.Path))
		for k, val := range m.Entry {
			e[k] = val
		}
		for k, val := range v.ModelEntry {
			e[k] = val
		}
		if v.Slots != nil {
			e["slots"] = v.Slots
		}
		models = append(models, e)
	}
	modelsJSON, err := json.Marshal(models)
	if err != nil {
		return nil, err
	}
	top["models"] = modelsJSON
	return json.MarshalIndent(top, "", "  ")
}

// expandModelsFrom appends the models of ModelsFrom.Config. Every key of a
// model entry except slots is kept; path becomes absolute; the weights file
// (a file path) is required to exist at run time.
func (p *Plan) expandModelsFrom() error {
	mf := p.ModelsFrom
	if mf == nil {
		return nil
	}
	cfgPath := p.Resolve(mf.Config)
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		return fmt.Errorf("%w: models_from: %v", ErrBadPlan, err)
	}
	var cfg struct {
		Models []map[string]json.RawMessage `json:"models"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("%w: models_from %s: %v", ErrBadPlan, cfgPath, err)
	}
	base := filepath.Dir(cfgPath)
	if mf.BaseDir != "" {
		base = p.Resolve(mf.BaseDir)
	}
	for i, e := range cfg.Models {
		str := func(k string) string {
			var s string
			_ = json.Unmarshal(e[k], &s)
			return s
		}
		m := Model{ID: str("id"), Family: str("family"), Task: str("task"), Mode: str("mode"), Path: str("path"),
			Entry: map[string]json.RawMessage{}}
		if slices.Contains(mf.ExcludeFamilies, m.Family) {
			continue
		}
		if m.ID == "" || m.Family == "" {
			return fmt.Errorf("%w: models_from %s: models[%d] has no id or family", ErrBadPlan, cfgPath, i)
		}
		if m.Path != "" && !filepath.IsAbs(m.Path) {
			m.Path = filepath.Join(base, m.Path)
		}
		for k, v := range e {
			if !slices.Contains(reservedEntryKeys, k) {
				m.Entry[k] = v
			}
		}
		req, ok := mf.Requests[m.Family]
		if !ok {
			return fmt.Errorf("%w: models_from %s: model %q has family %q, which has no request in models_from.requests: add one (or list the family in exclude_families)", ErrBadPlan, cfgPath, m.ID, m.Family)
		}
		m.Request = req
		if st, err := os.Stat(m.Path); err != nil || !st.IsDir() {
			m.Requires = append(m.Requires, m.Path)
		}
		p.Models = append(p.Models, m)
	}
	return nil
}
