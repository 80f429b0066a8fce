// Package results is the schema of results.json, the record of one
// checkpoint (or boundary) run, and what is derived from it: the totals, the
// summary tables (summary.md) and junit.xml. The totals can be recomputed
// from the raw responses in an evidence folder, so a reviewer never has to
// trust the numbers a run printed.
package results

import (
	"fmt"
	"time"
)

// SchemaVersion is the version of results.json this package writes and reads.
const SchemaVersion = 1

// SummaryFormat versions how summary.md and junit.xml are rendered from
// results.json. Verify regenerates them only when the archive's format is
// this one, so an archive made by an older tool still verifies.
const SummaryFormat = 2

// Kinds of exchange.
const (
	KindInference = "inference" // a model request (cold, warm, reload)
	KindUnload    = "unload"    // POST /v1/models/unload
	KindModels    = "models"    // GET /v1/models
)

// Check kinds.
const (
	CheckMatch    = "match"    // response equals the reference variant's
	CheckStartup  = "startup"  // server started and became ready
	CheckWarning  = "warning"  // experimental-scope warning present/absent as required
	CheckSchema   = "schema"   // /v1/models has the runtime's field set
	CheckCounters = "counters" // slot counters drained
	CheckLoaded   = "loaded"   // loaded / max_parallel_slots around unload
	CheckRequest  = "request"  // the request got an HTTP answer at all
	CheckShutdown = "shutdown" // clean exit on SIGTERM
	CheckBackend  = "backend"  // a requested backend is available
	CheckInput    = "input"    // a model's files or inputs exist
	CheckBuild    = "build"    // variant binary was built or found
	CheckCross    = "cross_backend"
)

// Results is results.json.
type Results struct {
	SchemaVersion int          `json:"schema_version"`
	SummaryFormat int          `json:"summary_format"`
	Kind          string       `json:"kind"` // "checkpoints" or "boundaries"
	Plan          PlanRef      `json:"plan"`
	Reference     string       `json:"reference_variant,omitempty"`
	Started       time.Time    `json:"started"`
	Finished      time.Time    `json:"finished"`
	Passed        bool         `json:"passed"`
	Notes         []string     `json:"notes,omitempty"`
	Backends      []Backend    `json:"backends,omitempty"`
	Variants      []Variant    `json:"variants,omitempty"`
	Steps         []string     `json:"steps,omitempty"` // step names in order, for tables
	Startups      []Startup    `json:"startups,omitempty"`
	Exchanges     []Exchange   `json:"exchanges,omitempty"`
	Checks        []Check      `json:"checks"`
	CrossBackend  []CrossCheck `json:"cross_backend,omitempty"`
	Totals        Totals       `json:"totals"`
}

// PlanRef names the plan that was run.
type PlanRef struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	File    string `json:"file"` // path inside the evidence folder
	SHA256  string `json:"sha256"`
}

// Backend is one backend the run covered.
type Backend struct {
	Name      string            `json:"name"`
	Env       map[string]string `json:"env,omitempty"`
	Detection string            `json:"detection"`
}

// Variant is one server command as run.
type Variant struct {
	Name           string   `json:"name"`
	Source         string   `json:"source"` // worktree, ref, binary
	Ref            string   `json:"ref,omitempty"`
	Commit         string   `json:"commit,omitempty"`
	Binary         string   `json:"binary"`
	Args           []string `json:"args,omitempty"`
	Runtime        string   `json:"runtime"` // legacy or parallel
	Slots          string   `json:"slots"`   // "omitted" or the JSON written
	ExpectWarning  bool     `json:"expect_warning"`
	ConfigOverride string   `json:"config_override,omitempty"`
}

// Startup records one server process from start to exit.
type Startup struct {
	Backend        string            `json:"backend"`
	Variant        string            `json:"variant"`
	Argv           []string          `json:"argv"`
	Env            map[string]string `json:"env,omitempty"` // the variables that matter
	Config         string            `json:"config"`        // evidence path of the config written
	PID            int               `json:"pid"`
	ReadyMs        int64             `json:"ready_ms"`
	Ready          bool              `json:"ready"`
	Error          string            `json:"error,omitempty"`
	Stdout         string            `json:"stdout_log"`
	Stderr         string            `json:"stderr_log"`
	WarningPrinted bool              `json:"warning_printed"`
	ExitStatus     *int              `json:"exit_status,omitempty"`
	ExitSignal     string            `json:"exit_signal,omitempty"`
	ShutdownMs     int64             `json:"shutdown_ms"`
}

// Exchange is one request and its response, stored under raw/.
type Exchange struct {
	ID           string `json:"id"`
	Backend      string `json:"backend"`
	Variant      string `json:"variant"`
	Model        string `json:"model"`
	Step         string `json:"step"`
	Kind         string `json:"kind"`
	Method       string `json:"method"`
	Path         string `json:"path"`
	RequestFile  string `json:"request_file"`
	ResponseFile string `json:"response_file,omitempty"` // status and headers (JSON)
	BodyFile     string `json:"body_file,omitempty"`
	Status       int    `json:"status"`
	ContentType  string `json:"content_type,omitempty"`
	BodySHA256   string `json:"body_sha256,omitempty"`
	DurationMs   int64  `json:"duration_ms"`
	Error        string `json:"error,omitempty"`
}

// Key identifies the same exchange across variants and backends.
func (e Exchange) Key() string { return e.Model + "/" + e.Step }

// Check is one verdict.
type Check struct {
	Backend  string `json:"backend,omitempty"`
	Variant  string `json:"variant,omitempty"`
	Model    string `json:"model,omitempty"`
	Step     string `json:"step,omitempty"`
	Kind     string `json:"kind"`
	Required bool   `json:"required"`
	Passed   bool   `json:"passed"`
	Message  string `json:"message"`
	Exchange string `json:"exchange,omitempty"`  // the candidate exchange ID
	Against  string `json:"reference,omitempty"` // the reference exchange ID
	Path     string `json:"path,omitempty"`      // first differing path
	Want     string `json:"want,omitempty"`
	Got      string `json:"got,omitempty"`
}

// Name is a stable, readable test-case name.
func (c Check) Name() string {
	s := c.Kind
	for _, p := range []string{c.Backend, c.Variant, c.Model, c.Step} {
		if p != "" {
			s += " " + p
		}
	}
	return s
}

// CrossCheck compares one exchange across two backends with a tolerance.
type CrossCheck struct {
	Model     string  `json:"model"`
	Step      string  `json:"step"`
	Variant   string  `json:"variant"`
	Backend   string  `json:"backend"`
	Against   string  `json:"against_backend"`
	Exchange  string  `json:"exchange"`
	Reference string  `json:"reference"`
	Within    bool    `json:"within"`
	Numbers   int     `json:"numbers"`
	MaxAbs    float64 `json:"max_abs_diff"`
	Path      string  `json:"path,omitempty"`
	Want      string  `json:"want,omitempty"`
	Got       string  `json:"got,omitempty"`
	Required  bool    `json:"required"`
}

// Totals are counts derived from exchanges and checks.
type Totals struct {
	Requests       int `json:"requests"` // inference exchanges, every variant
	Matched        int `json:"matched"`  // of those, equal to the reference
	Compared       int `json:"compared"` // every exchange compared (inference, unload, models)
	ComparedEqual  int `json:"compared_equal"`
	Checks         int `json:"checks"`
	Failed         int `json:"failed"`
	RequiredFailed int `json:"required_failed"`
	Cross          int `json:"cross_backend"`
	CrossWithin    int `json:"cross_backend_within"`
}

// Compute derives the totals from the checks and exchanges. Requests are
// the inference exchanges of every variant; a reference exchange counts as
// matched when it was answered with a 2xx status, any other when its match
// check passed.
func Compute(r *Results) Totals {
	var t Totals
	kind := map[string]string{}
	for _, e := range r.Exchanges {
		kind[e.ID] = e.Kind
		if e.Kind == KindInference {
			t.Requests++
			// The reference's own answers are what the others must match.
			if e.Variant == r.Reference && e.Error == "" && e.Status/100 == 2 {
				t.Matched++
			}
		}
	}
	for _, c := range r.Checks {
		t.Checks++
		if !c.Passed {
			t.Failed++
			if c.Required {
				t.RequiredFailed++
			}
		}
		if c.Kind == CheckMatch {
			t.Compared++
			if c.Passed {
				t.ComparedEqual++
			}
			if kind[c.Exchange] == KindInference && c.Passed {
				t.Matched++
			}
		}
	}
	for _, x := range r.CrossBackend {
		t.Cross++
		if x.Within {
			t.CrossWithin++
		}
	}
	return t
}

// Finish sets the totals and the verdict.
func (r *Results) Finish() {
	r.SummaryFormat = SummaryFormat
	r.Totals = Compute(r)
	r.Passed = r.Totals.RequiredFailed == 0
	for _, x := range r.CrossBackend {
		if x.Required && !x.Within {
			r.Passed = false
		}
	}
}

// Failures lists the failed checks, required ones first.
func (r *Results) Failures() []Check {
	var req, opt []Check
	for _, c := range r.Checks {
		if c.Passed {
			continue
		}
		if c.Required {
			req = append(req, c)
		} else {
			opt = append(opt, c)
		}
	}
	return append(req, opt...)
}

// Validate checks the parts of results.json that tools rely on.
func (r *Results) Validate() error {
	if r.SchemaVersion != SchemaVersion {
		return fmt.Errorf("results.json: schema_version %d, this tool reads %d", r.SchemaVersion, SchemaVersion)
	}
	if r.Kind == "" {
		return fmt.Errorf("results.json: kind is missing")
	}
	ids := map[string]bool{}
	for _, e := range r.Exchanges {
		if e.ID == "" || ids[e.ID] {
			return fmt.Errorf("results.json: exchange id %q is empty or repeated", e.ID)
		}
		ids[e.ID] = true
	}
	for _, c := range r.Checks {
		if c.Kind == "" {
			return fmt.Errorf("results.json: a check has no kind")
		}
		for _, id := range []string{c.Exchange, c.Against} {
			if id != "" && !ids[id] {
				return fmt.Errorf("results.json: check %q names unknown exchange %q", c.Name(), id)
			}
		}
	}
	return nil
}
