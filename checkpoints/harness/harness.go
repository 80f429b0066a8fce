// Package harness runs checkpoint plans: it builds (or finds) each variant's
// server, starts it fresh per backend, drives the plan's steps over HTTP,
// compares every response with the reference variant's, and writes an
// evidence folder and archive (see package evidence/archive).
package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/audioproof/audioproof/checkpoints/compare"
	"github.com/audioproof/audioproof/checkpoints/plan"
	"github.com/audioproof/audioproof/evidence/archive"
	"github.com/audioproof/audioproof/evidence/manifest"
	"github.com/audioproof/audioproof/evidence/results"
)

// Options configure a run.
type Options struct {
	Plan     *plan.Plan
	RepoDir  string   // repository root: worktree builds and the servers' working folder
	Base     string   // overrides the plan's base ref
	OutDir   string   // receives bin/, the evidence folder and the archive
	Backends []string // overrides the plan's backends
	// Progress receives progress: a bar when Terminal, plain lines otherwise.
	Progress io.Writer
	Terminal bool
	// LibraryDirs are the ggml folders recorded in the manifest; nil means
	// AUDIOPROOF_GGML_DIR or the folders under .deps/ggml.
	LibraryDirs []string
}

// Outcome is what a run produced.
type Outcome struct {
	Results *results.Results
	Folder  string
	Archive string
}

// Run executes the plan. It returns an error only when no evidence could be
// written; failed checks are in the results.
func Run(ctx context.Context, o Options) (*Outcome, error) {
	p := o.Plan
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	repo, err := filepath.Abs(o.RepoDir)
	if err != nil {
		return nil, err
	}
	base := p.Base
	if o.Base != "" {
		base = o.Base
	}
	m := manifest.New("checkpoints", "checkpoints run")
	if err := m.CollectSource(repo); err != nil {
		m.Source.BaseNote = err.Error()
	}
	m.CollectEnv()
	name := archive.Name(m.Created, m.Source.Commit)
	outDir, err := filepath.Abs(o.OutDir)
	if err != nil {
		return nil, err
	}
	f, err := archive.NewFolder(filepath.Join(outDir, name))
	if err != nil {
		return nil, err
	}
	if err := f.WriteFile("plan.json", p.Raw); err != nil {
		return nil, err
	}
	r := &results.Results{
		SchemaVersion: results.SchemaVersion, Kind: "checkpoints", Reference: p.Reference,
		Started: time.Now().UTC(), Checks: []results.Check{}, Steps: p.TableSteps(),
		Plan: results.PlanRef{Name: p.Name, Version: p.Version, File: "plan.json", SHA256: results.SHA256(p.Raw)},
	}
	r.Notes = append(r.Notes, "plan: "+p.Source)
	h := &harness{o: o, p: p, repo: repo, f: f, r: r, m: m}
	h.b = &builder{repoDir: repo, binDir: filepath.Join(outDir, "bin"), base: base, cache: map[string]*built{},
		record: m.AddCommand, notes: &r.Notes}
	h.run(ctx)
	m.Source.BaseRef = h.b.baseRef
	if m.Source.BaseRef == "" {
		m.Source.BaseRef = base
	}
	m.Source.BaseCommit = h.b.baseCommit
	if h.b.baseNote != "" {
		m.Source.BaseNote = h.b.baseNote
	}
	h.recordFiles()
	r.Finished = time.Now().UTC()
	r.Finish()
	if err := f.WriteJSON(archive.ManifestFile, m); err != nil {
		return nil, err
	}
	if err := archive.WriteReports(f, r); err != nil {
		return nil, err
	}
	out, err := archive.Pack(f.Dir)
	if err != nil {
		return nil, fmt.Errorf("packing %s: %w", f.Dir, err)
	}
	return &Outcome{Results: r, Folder: f.Dir, Archive: out}, nil
}

type harness struct {
	o    Options
	p    *plan.Plan
	repo string
	f    *archive.Folder
	r    *results.Results
	m    *manifest.Manifest
	b    *builder
	bins map[string]*built // variant name -> binary
	prog *progress
	seq  int
}

func (h *harness) check(c results.Check) {
	h.r.Checks = append(h.r.Checks, c)
}

func (h *harness) run(ctx context.Context) {
	p := h.p
	h.bins = map[string]*built{}
	for i := range p.Variants {
		v := &p.Variants[i]
		fmt.Fprintf(h.o.Progress, "building %s (%s)\n", v.Name, v.Build.Source)
		b := h.b.build(ctx, v)
		h.bins[v.Name] = b
		rv := results.Variant{Name: v.Name, Source: b.Source, Ref: b.Ref, Commit: b.Commit, Binary: b.Binary,
			Args: v.Args, Runtime: v.RuntimeName(), Slots: v.SlotsText(), ExpectWarning: v.RuntimeName() == plan.RuntimeParallel}
		if len(v.ModelEntry) > 0 {
			data, _ := json.Marshal(v.ModelEntry)
			rv.ConfigOverride = string(data)
		}
		h.r.Variants = append(h.r.Variants, rv)
		c := results.Check{Variant: v.Name, Kind: results.CheckBuild, Required: true, Passed: b.Err == nil,
			Message: "binary " + b.Binary}
		if b.Err != nil {
			c.Message = b.Err.Error()
		}
		h.check(c)
	}
	for _, m := range p.Models {
		for _, req := range m.Requires {
			if _, err := os.Stat(req); err != nil {
				h.check(results.Check{Model: m.ID, Kind: results.CheckInput, Required: true, Passed: false,
					Message: fmt.Sprintf("model %s needs %s, which is missing: run 'make deps' to fetch the weights (%v)", m.ID, req, err)})
			}
		}
		for _, file := range m.Request.Files {
			if _, err := os.Stat(p.Resolve(file)); err != nil {
				h.check(results.Check{Model: m.ID, Kind: results.CheckInput, Required: true, Passed: false,
					Message: fmt.Sprintf("input %s for model %s is missing: %v", p.Resolve(file), m.ID, err)})
			}
		}
	}
	backends := h.backends(ctx)
	units := len(backends) * len(p.Variants) * (2 + len(p.Models)*len(p.Steps))
	h.prog = newProgress(h.o.Progress, h.o.Terminal, units)
	defer h.prog.finish()
	for _, be := range backends {
		for i := range p.Variants {
			if ctx.Err() != nil {
				break
			}
			h.runVariant(ctx, be, &p.Variants[i])
		}
		h.compareBackend(be.Name)
	}
	if ctx.Err() != nil {
		h.r.Notes = append(h.r.Notes, "the run was interrupted; the evidence covers what ran until then")
		h.check(results.Check{Kind: results.CheckStartup, Required: true, Message: "run interrupted: " + ctx.Err().Error()})
	}
	h.crossBackend(backends)
}

// backend is a backend the run covers, with its extra environment.
type backend struct {
	Name string
	Env  map[string]string
}

// deviceRow matches a --list-devices row of a backend's device: a table
// row whose first column is the backend, or a ggml device name (Vulkan0,
// CUDA0). Log lines such as "no GPU Vulkan device visible" do not match.
var deviceRow = map[string]*regexp.Regexp{
	"vulkan": regexp.MustCompile(`(?i)^\s*vulkan\s|\bVulkan[0-9]+\b`),
	"cuda":   regexp.MustCompile(`(?i)^\s*cuda\s|\bCUDA[0-9]+\b`),
}

// backends resolves the plan's backends: cpu always; vulkan and cuda when
// the server's --list-devices shows a device of that kind.
func (h *harness) backends(ctx context.Context) []backend {
	want := h.p.Backends
	if len(h.o.Backends) > 0 {
		want = h.o.Backends
	}
	auto := false
	var names []string
	for _, b := range want {
		if b == plan.BackendAuto {
			auto = true
			continue
		}
		names = append(names, b)
	}
	if auto {
		for _, b := range []string{"cpu", "vulkan", "cuda"} {
			if !contains(names, b) {
				names = append(names, b)
			}
		}
	}
	probe := h.probeBinary()
	var out []backend
	for _, name := range names {
		env := h.p.BackendEnv[name]
		if name == "cpu" {
			out = append(out, backend{Name: name, Env: env})
			h.r.Backends = append(h.r.Backends, results.Backend{Name: name, Env: env, Detection: "always run"})
			continue
		}
		ok, detail := h.detect(ctx, probe, name, env)
		if ok {
			out = append(out, backend{Name: name, Env: env})
			h.r.Backends = append(h.r.Backends, results.Backend{Name: name, Env: env, Detection: detail})
			continue
		}
		if auto && !contains(want, name) {
			h.r.Notes = append(h.r.Notes, fmt.Sprintf("backend %s skipped: %s", name, detail))
			continue
		}
		h.check(results.Check{Backend: name, Kind: results.CheckBackend, Required: true, Passed: false,
			Message: fmt.Sprintf("backend %s was requested but is not available: %s", name, detail)})
	}
	return out
}

func (h *harness) probeBinary() string {
	if b := h.bins[h.p.Reference]; b != nil && b.Err == nil {
		for _, v := range h.p.Variants {
			if v.Name == h.p.Reference && v.UsesStandardFlags() {
				return b.Binary
			}
		}
	}
	for _, v := range h.p.Variants {
		if b := h.bins[v.Name]; b != nil && b.Err == nil && v.UsesStandardFlags() {
			return b.Binary
		}
	}
	return ""
}

func (h *harness) detect(ctx context.Context, bin, name string, env map[string]string) (bool, string) {
	if bin == "" {
		return false, "no server binary was built to ask --list-devices"
	}
	argv := []string{bin, "--backend", name, "--list-devices"}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = h.repo
	cmd.Env = mergeEnv(os.Environ(), env)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	h.m.AddCommand(manifest.Command{Argv: argv, Dir: h.repo, Env: envList(env), Exit: &code, Purpose: "detect " + name + " devices"})
	if err := h.f.WriteFile("logs/list-devices-"+name+".log", out); err != nil {
		return false, err.Error()
	}
	for _, line := range strings.Split(string(out), "\n") {
		if deviceRow[name].MatchString(line) {
			return true, fmt.Sprintf("--list-devices shows %q", strings.TrimSpace(line))
		}
	}
	if err != nil {
		return false, fmt.Sprintf("--list-devices failed (%v): %s", err, tail(strings.TrimSpace(string(out)), 300))
	}
	return false, "--list-devices shows no " + name + " device"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func mergeEnv(base []string, extra ...map[string]string) []string {
	out := append([]string(nil), base...)
	for _, e := range extra {
		keys := make([]string, 0, len(e))
		for k := range e {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, k+"="+e[k])
		}
	}
	return out
}

func envList(e map[string]string) []string {
	var out []string
	for k, v := range e {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// relevantEnv is the environment recorded in a startup record: what the
// plan set plus inherited variables that change device selection.
func relevantEnv(extra ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		for _, p := range []string{"GGML_", "VK_", "CUDA_", "AUDIOPROOF", "LD_LIBRARY_PATH"} {
			if strings.HasPrefix(k, p) {
				out[k] = v
			}
		}
	}
	for _, e := range extra {
		for k, v := range e {
			out[k] = v
		}
	}
	return out
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func fileName(s string) string { return unsafeName.ReplaceAllString(s, "_") }

func (h *harness) runVariant(ctx context.Context, be backend, v *plan.Variant) {
	p := h.p
	units := 2 + len(p.Models)*len(p.Steps)
	label := be.Name + " " + v.Name
	b := h.bins[v.Name]
	if b == nil || b.Err != nil {
		h.prog.add(units, label+": not run (no binary)")
		return
	}
	st := results.Startup{Backend: be.Name, Variant: v.Name}
	defer func() { h.r.Startups = append(h.r.Startups, st) }()
	cfg, err := p.RenderConfig(v)
	if err != nil {
		st.Error = err.Error()
		h.check(results.Check{Backend: be.Name, Variant: v.Name, Kind: results.CheckStartup, Required: true, Message: "cannot render config: " + err.Error()})
		h.prog.add(units, label+": config failed")
		return
	}
	st.Config = "configs/" + fileName(be.Name) + "/" + fileName(v.Name) + ".json"
	if err := h.f.WriteFile(st.Config, cfg); err != nil {
		st.Error = err.Error()
		return
	}
	port, err := freePort()
	if err != nil {
		st.Error = err.Error()
		h.check(results.Check{Backend: be.Name, Variant: v.Name, Kind: results.CheckStartup, Required: true, Message: "no free port: " + err.Error()})
		return
	}
	host := "127.0.0.1"
	subst := strings.NewReplacer("{config}", h.f.Path(st.Config), "{host}", host, "{port}", strconv.Itoa(port), "{backend}", be.Name)
	argv := []string{b.Binary}
	if v.UsesStandardFlags() {
		argv = append(argv, "--config", h.f.Path(st.Config), "--host", host, "--port", strconv.Itoa(port), "--backend", be.Name)
	}
	for _, a := range v.Args {
		argv = append(argv, subst.Replace(a))
	}
	st.Argv = argv
	st.Env = relevantEnv(be.Env, v.Env)
	logBase := "logs/" + fileName(be.Name) + "/" + fileName(v.Name)
	st.Stdout, st.Stderr = logBase+".stdout.log", logBase+".stderr.log"
	if err := os.MkdirAll(filepath.Dir(h.f.Path(st.Stdout)), 0o755); err != nil {
		st.Error = err.Error()
		return
	}
	baseURL := fmt.Sprintf("http://%s:%d", host, port)
	start := time.Now()
	proc, err := startProcess(argv, mergeEnv(os.Environ(), be.Env, v.Env), h.repo, h.f.Path(st.Stdout), h.f.Path(st.Stderr), baseURL)
	cmdRec := manifest.Command{Argv: argv, Dir: h.repo, Env: envList(mergeMaps(be.Env, v.Env)), Purpose: "server " + v.Name + " on " + be.Name}
	if err != nil {
		st.Error = err.Error()
		h.m.AddCommand(cmdRec)
		h.check(results.Check{Backend: be.Name, Variant: v.Name, Kind: results.CheckStartup, Required: true, Message: err.Error()})
		h.prog.add(units, label+": failed to start")
		return
	}
	st.PID = proc.cmd.Process.Pid
	defer func() {
		// Always end the process, also on early returns.
		proc.kill()
		code, sig := proc.exitStatus()
		st.ExitStatus, st.ExitSignal = code, sig
		cmdRec.Exit = code
		cmdRec.Duration = time.Since(start).Milliseconds()
		h.m.AddCommand(cmdRec)
	}()
	healthBackend, readyErr := proc.waitReady(ctx, time.Duration(p.Server.ReadyTimeoutMs)*time.Millisecond)
	st.ReadyMs = time.Since(start).Milliseconds()
	if readyErr != nil {
		proc.kill()
		st.Error = readyErr.Error()
		msg := readyErr.Error()
		if t := logTail(h.f.Path(st.Stderr), 600); t != "" {
			msg += "; stderr: " + t
		}
		h.check(results.Check{Backend: be.Name, Variant: v.Name, Kind: results.CheckStartup, Required: true, Passed: false, Message: msg})
		h.prog.add(units, label+": "+readyErr.Error())
		return
	}
	st.Ready = true
	h.check(results.Check{Backend: be.Name, Variant: v.Name, Kind: results.CheckStartup, Required: true, Passed: true,
		Message: fmt.Sprintf("ready in %d ms (pid %d)", st.ReadyMs, st.PID)})
	h.prog.add(1, label+": ready in "+strconv.FormatInt(st.ReadyMs, 10)+" ms")
	if healthBackend != "" && healthBackend != be.Name {
		h.check(results.Check{Backend: be.Name, Variant: v.Name, Kind: results.CheckBackend, Required: true,
			Message: fmt.Sprintf("started for backend %s but /health reports backend %q", be.Name, healthBackend),
			Path:    "/health $.backend", Want: be.Name, Got: healthBackend})
	}

	logs := readFile(h.f.Path(st.Stdout)) + readFile(h.f.Path(st.Stderr))
	st.WarningPrinted = strings.Contains(logs, p.WarningText)
	parallel := v.RuntimeName() == plan.RuntimeParallel
	wc := results.Check{Backend: be.Name, Variant: v.Name, Kind: results.CheckWarning, Required: true}
	switch {
	case parallel && st.WarningPrinted:
		wc.Passed, wc.Message = true, "experimental-scope warning printed, as required with --parallel-jobs"
	case parallel:
		wc.Message = fmt.Sprintf("experimental-scope warning (%q) missing: a flagged start must print it", p.WarningText)
	case st.WarningPrinted:
		wc.Message = fmt.Sprintf("experimental-scope warning (%q) printed by an unflagged start: only --parallel-jobs may print it", p.WarningText)
	default:
		wc.Passed, wc.Message = true, "no experimental-scope warning, as required without --parallel-jobs"
	}
	h.check(wc)

	client := &http.Client{Timeout: time.Duration(p.Server.RequestTimeout) * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, model := range p.Models {
		h.runModel(ctx, client, proc, be, v, model)
	}

	clean, took := proc.stop(time.Duration(p.Server.ShutdownTimeout) * time.Millisecond)
	st.ShutdownMs = took.Milliseconds()
	code, sig := proc.exitStatus()
	sc := results.Check{Backend: be.Name, Variant: v.Name, Kind: results.CheckShutdown, Required: true}
	switch {
	case !clean:
		sc.Message = fmt.Sprintf("did not exit within %d ms of SIGTERM; killed", p.Server.ShutdownTimeout)
	case code != nil && containsInt(p.Server.ExitStatuses, *code):
		sc.Passed, sc.Message = true, fmt.Sprintf("exited with status %d after SIGTERM in %d ms", *code, st.ShutdownMs)
	case code != nil:
		sc.Message = fmt.Sprintf("exited with status %d after SIGTERM (clean statuses: %v)", *code, p.Server.ExitStatuses)
	default:
		sc.Message = fmt.Sprintf("ended by signal %s instead of exiting cleanly on SIGTERM", sig)
	}
	h.check(sc)
	h.prog.add(1, label+": "+sc.Message)
}

func mergeMaps(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func containsInt(list []int, x int) bool {
	for _, v := range list {
		if v == x {
			return true
		}
	}
	return false
}

func readFile(p string) string {
	data, _ := os.ReadFile(p)
	return string(data)
}

// request builds the body of a model's inference request.
func (h *harness) request(model plan.Model) (contentType string, body []byte, err error) {
	rq := model.Request
	if len(rq.Fields) > 0 || len(rq.Files) > 0 {
		var buf bytes.Buffer
		w := multipart.NewWriter(&buf)
		// A fixed boundary keeps request bytes identical across variants.
		if err := w.SetBoundary("audioproof-checkpoints-0123456789"); err != nil {
			return "", nil, err
		}
		fields := map[string]string{"model": model.ID}
		for k, v := range rq.Fields {
			fields[k] = v
		}
		for _, k := range sortedKeys(fields) {
			if err := w.WriteField(k, fields[k]); err != nil {
				return "", nil, err
			}
		}
		for _, k := range sortedKeys(rq.Files) {
			path := h.p.Resolve(rq.Files[k])
			data, err := os.ReadFile(path)
			if err != nil {
				return "", nil, fmt.Errorf("request file for model %s: %w", model.ID, err)
			}
			hdr := textproto.MIMEHeader{}
			hdr.Set("Content-Disposition", fmt.Sprintf(`form-data; name="%s"; filename="%s"`, k, filepath.Base(path)))
			hdr.Set("Content-Type", "audio/wav")
			part, err := w.CreatePart(hdr)
			if err != nil {
				return "", nil, err
			}
			if _, err := part.Write(data); err != nil {
				return "", nil, err
			}
		}
		if err := w.Close(); err != nil {
			return "", nil, err
		}
		return w.FormDataContentType(), buf.Bytes(), nil
	}
	obj := map[string]json.RawMessage{}
	if rq.JSON != nil {
		if err := json.Unmarshal(rq.JSON, &obj); err != nil {
			return "", nil, err
		}
	}
	if _, ok := obj["model"]; !ok {
		id, _ := json.Marshal(model.ID)
		obj["model"] = id
	}
	body, err = json.Marshal(obj)
	return "application/json", body, err
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// exchange sends one request, stores it and its response under raw/, and
// records it.
func (h *harness) exchange(ctx context.Context, client *http.Client, proc *process, be, variant, model, step, kind, method, path, contentType string, body []byte) (results.Exchange, exchangeResult) {
	h.seq++
	id := fmt.Sprintf("%s/%s/%s/%03d-%s", fileName(be), fileName(variant), fileName(model), h.seq, fileName(step))
	e := results.Exchange{ID: id, Backend: be, Variant: variant, Model: model, Step: step, Kind: kind, Method: method, Path: path,
		RequestFile: "raw/" + id + ".request.json"}
	raw := results.RawRequest{Method: method, URL: path}
	if contentType != "" {
		raw.Header = map[string][]string{"Content-Type": {contentType}}
	}
	if body != nil {
		if compare.IsJSON(contentType) && json.Valid(body) {
			raw.JSON = body
		} else {
			raw.BodyFile = "raw/" + id + ".request.body"
			_ = h.f.WriteFile(raw.BodyFile, body)
		}
	}
	_ = h.f.WriteJSON(e.RequestFile, raw)
	res := doRequest(ctx, client, method, proc.baseURL+path, contentType, body)
	e.DurationMs = res.dur.Milliseconds()
	if res.err != nil {
		e.Error = res.err.Error()
		if proc.exited() {
			code, sig := proc.exitStatus()
			e.Error += fmt.Sprintf(" (the server has exited: status %v %s)", deref(code), sig)
		}
	}
	if res.header != nil {
		e.Status = res.status
		e.ContentType = res.header.Get("Content-Type")
		e.ResponseFile = "raw/" + id + ".response.json"
		e.BodyFile = "raw/" + id + ".response.body"
		e.BodySHA256 = results.SHA256(res.body)
		_ = h.f.WriteJSON(e.ResponseFile, results.RawResponse{Status: res.status, Header: res.header})
		_ = h.f.WriteFile(e.BodyFile, res.body)
	}
	h.r.Exchanges = append(h.r.Exchanges, e)
	return e, res
}

func deref(p *int) any {
	if p == nil {
		return "-"
	}
	return *p
}

func (h *harness) runModel(ctx context.Context, client *http.Client, proc *process, be backend, v *plan.Variant, model plan.Model) {
	parallel := v.RuntimeName() == plan.RuntimeParallel
	ctype, body, reqErr := h.request(model)
	names := h.p.StepNames()
	base := results.Check{Backend: be.Name, Variant: v.Name, Model: model.ID}
	for i, step := range h.p.Steps {
		name := names[i]
		label := fmt.Sprintf("%s %s %s %s", be.Name, v.Name, model.ID, name)
		switch step {
		case plan.StepCold, plan.StepWarm, plan.StepReload:
			c := base
			c.Step, c.Kind, c.Required = name, results.CheckRequest, true
			if reqErr != nil {
				c.Message = reqErr.Error()
				h.check(c)
				h.prog.add(1, label+": "+reqErr.Error())
				continue
			}
			e, res := h.exchange(ctx, client, proc, be.Name, v.Name, model.ID, name, results.KindInference, model.Request.Method, model.Request.Path, ctype, body)
			c.Exchange = e.ID
			switch {
			case res.err != nil:
				c.Message = "no answer: " + res.err.Error()
			case res.status/100 != 2:
				c.Message = fmt.Sprintf("%s %s answered %d: %s", model.Request.Method, model.Request.Path, res.status, tail(strings.TrimSpace(string(res.body)), 300))
			default:
				c.Passed, c.Message = true, fmt.Sprintf("answered %d in %d ms", res.status, e.DurationMs)
			}
			h.check(c)
			h.prog.add(1, label+": "+c.Message)
		case plan.StepUnload:
			h.listCheck(ctx, client, proc, be, v, model.ID, name+"-before", true, parallel)
			idJSON, _ := json.Marshal(map[string]string{"id": model.ID})
			e, res := h.exchange(ctx, client, proc, be.Name, v.Name, model.ID, name, results.KindUnload, http.MethodPost, "/v1/models/unload", "application/json", idJSON)
			c := base
			c.Step, c.Kind, c.Required, c.Exchange = name, results.CheckRequest, true, e.ID
			var ans struct {
				ID     string `json:"id"`
				Loaded *bool  `json:"loaded"`
			}
			switch {
			case res.err != nil:
				c.Message = "no answer: " + res.err.Error()
			case res.status != 200:
				c.Message = fmt.Sprintf("POST /v1/models/unload answered %d: %s", res.status, tail(strings.TrimSpace(string(res.body)), 300))
			case json.Unmarshal(res.body, &ans) != nil || ans.Loaded == nil || *ans.Loaded || ans.ID != model.ID:
				c.Message = fmt.Sprintf("POST /v1/models/unload answered %s, want {\"id\":%q,\"loaded\":false}", tail(string(res.body), 200), model.ID)
			default:
				c.Passed, c.Message = true, "unloaded"
			}
			h.check(c)
			h.listCheck(ctx, client, proc, be, v, model.ID, name+"-after", false, parallel)
			h.prog.add(1, label+": "+c.Message)
		}
	}
	h.listCheck(ctx, client, proc, be, v, model.ID, "models", true, parallel)
}

// listCheck fetches /v1/models and checks the schema of every entry, the
// drained counters (parallel), and the model's loaded state and capacity.
func (h *harness) listCheck(ctx context.Context, client *http.Client, proc *process, be backend, v *plan.Variant, modelID, step string, wantLoaded, parallel bool) {
	waited := time.Duration(0)
	if parallel {
		waited = h.waitDrained(ctx, client, proc)
	}
	e, res := h.exchange(ctx, client, proc, be.Name, v.Name, modelID, step, results.KindModels, http.MethodGet, "/v1/models", "", nil)
	base := results.Check{Backend: be.Name, Variant: v.Name, Model: modelID, Step: step, Required: true, Exchange: e.ID}
	if res.err != nil || res.status != 200 {
		c := base
		c.Kind = results.CheckSchema
		c.Message = fmt.Sprintf("GET /v1/models failed: status %d %v", res.status, res.err)
		h.check(c)
		return
	}
	var list struct {
		Object string           `json:"object"`
		Data   []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(res.body, &list); err != nil || list.Object != "list" {
		c := base
		c.Kind = results.CheckSchema
		c.Message = fmt.Sprintf("GET /v1/models is not {\"object\":\"list\",\"data\":[...]}: %s", tail(string(res.body), 200))
		h.check(c)
		return
	}
	schema := base
	schema.Kind = results.CheckSchema
	schema.Passed = true
	runtime := "legacy"
	if parallel {
		runtime = "parallel"
	}
	schema.Message = fmt.Sprintf("%s schema: %s", runtime, map[bool]string{true: "slots, active_slots, queued_requests, max_parallel_slots on every model", false: "no slot fields"}[parallel])
	counters := base
	counters.Kind = results.CheckCounters
	counters.Passed = true
	counters.Message = "active_slots and queued_requests are 0 on every model"
	if waited > 0 {
		counters.Message += fmt.Sprintf(" (after %d ms for the last lease to be released)", waited.Milliseconds())
	}
	var entry map[string]any
	for i, d := range list.Data {
		id, _ := d["id"].(string)
		if id == modelID {
			entry = d
		}
		for _, f := range results.SlotFields {
			_, has := d[f]
			if parallel && !has && schema.Passed {
				schema.Passed = false
				schema.Message = fmt.Sprintf("parallel runtime: model %q has no %q in /v1/models", id, f)
				schema.Path, schema.Want, schema.Got = fmt.Sprintf("$.data[%d].%s", i, f), "present", "(absent)"
			}
			if !parallel && has && schema.Passed {
				schema.Passed = false
				schema.Message = fmt.Sprintf("legacy runtime: model %q reports %q in /v1/models; legacy emits no slot fields", id, f)
				schema.Path, schema.Want, schema.Got = fmt.Sprintf("$.data[%d].%s", i, f), "(absent)", render(d[f])
			}
		}
		if parallel {
			for _, f := range []string{"active_slots", "queued_requests"} {
				v, has := d[f]
				if !has {
					continue // reported by the schema check
				}
				if n, ok := v.(float64); (!ok || n != 0) && counters.Passed {
					counters.Passed = false
					counters.Message = fmt.Sprintf("model %q has %s=%s with no request in flight, still after %d ms: a lease or queue entry leaked", id, f, render(d[f]), h.p.Server.DrainTimeoutMs)
					counters.Path, counters.Want, counters.Got = fmt.Sprintf("$.data[%d].%s", i, f), "0", render(d[f])
				}
			}
		}
	}
	h.check(schema)
	if parallel {
		h.check(counters)
	}
	lc := base
	lc.Kind = results.CheckLoaded
	if entry == nil {
		lc.Message = fmt.Sprintf("model %q is not listed by /v1/models", modelID)
		h.check(lc)
		return
	}
	loaded, ok := entry["loaded"].(bool)
	mps, hasMPS := entry["max_parallel_slots"]
	switch {
	case !ok:
		lc.Message = fmt.Sprintf("model %q has no boolean \"loaded\" in /v1/models", modelID)
		lc.Path, lc.Want, lc.Got = "loaded", fmt.Sprint(wantLoaded), render(entry["loaded"])
	case loaded != wantLoaded:
		lc.Message = fmt.Sprintf("model %q loaded=%v %s, want %v", modelID, loaded, stepWhen(step), wantLoaded)
		lc.Path, lc.Want, lc.Got = "loaded", fmt.Sprint(wantLoaded), fmt.Sprint(loaded)
	case parallel && wantLoaded && (!hasMPS || !isPositiveInt(mps)):
		lc.Message = fmt.Sprintf("model %q is loaded but max_parallel_slots is %s, want the pool capacity (>= 1)", modelID, render(mps))
		lc.Path, lc.Want, lc.Got = "max_parallel_slots", ">= 1", render(mps)
	case parallel && !wantLoaded && mps != nil:
		lc.Message = fmt.Sprintf("model %q is unloaded but max_parallel_slots is %s, want null", modelID, render(mps))
		lc.Path, lc.Want, lc.Got = "max_parallel_slots", "null", render(mps)
	default:
		lc.Passed = true
		lc.Message = fmt.Sprintf("loaded=%v %s", loaded, stepWhen(step))
		if parallel {
			lc.Message += ", max_parallel_slots=" + render(mps)
		}
	}
	h.check(lc)
}

// waitDrained polls /v1/models (without recording) until every model's
// active_slots and queued_requests are 0 or the plan's drain timeout
// passes: a lease is released just after its response is written, so a
// client can see it for a moment. It returns how long it waited.
func (h *harness) waitDrained(ctx context.Context, client *http.Client, proc *process) time.Duration {
	start := time.Now()
	deadline := start.Add(time.Duration(h.p.Server.DrainTimeoutMs) * time.Millisecond)
	for polls := 0; ; polls++ {
		res := doRequest(ctx, client, http.MethodGet, proc.baseURL+"/v1/models", "", nil)
		if res.err != nil || res.status != 200 || drained(res.body) || time.Now().After(deadline) {
			if polls == 0 {
				return 0
			}
			return time.Since(start).Truncate(time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return time.Since(start)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func drained(body []byte) bool {
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if json.Unmarshal(body, &list) != nil {
		return true
	}
	for _, d := range list.Data {
		for _, f := range []string{"active_slots", "queued_requests"} {
			if n, ok := d[f].(float64); ok && n != 0 {
				return false
			}
		}
	}
	return true
}

func stepWhen(step string) string {
	switch {
	case strings.HasSuffix(step, "-before"):
		return "before unload"
	case strings.HasSuffix(step, "-after"):
		return "after unload"
	}
	return "after the model's steps"
}

func isPositiveInt(v any) bool {
	n, ok := v.(float64)
	return ok && n >= 1 && n == float64(int64(n))
}

func render(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// compareBackend compares every exchange of every variant with the
// reference variant's exchange at the same model and step.
func (h *harness) compareBackend(be string) {
	ref := map[string]results.Exchange{}
	for _, e := range h.r.Exchanges {
		if e.Backend == be && e.Variant == h.p.Reference {
			ref[e.Key()] = e
		}
	}
	read := func(rel string) ([]byte, error) { return os.ReadFile(h.f.Path(rel)) }
	for _, e := range h.r.Exchanges {
		if e.Backend != be || e.Variant == h.p.Reference || e.Error != "" {
			continue
		}
		c := results.Check{Backend: be, Variant: e.Variant, Model: e.Model, Step: e.Step, Kind: results.CheckMatch,
			Required: true, Exchange: e.ID}
		re, ok := ref[e.Key()]
		if !ok || re.Error != "" || re.ResponseFile == "" {
			c.Message = fmt.Sprintf("the reference variant %s has no answer for %s to compare with", h.p.Reference, e.Key())
			h.check(c)
			continue
		}
		c.Against = re.ID
		a, err1 := results.LoadResponse(read, re)
		b, err2 := results.LoadResponse(read, e)
		if err1 != nil || err2 != nil {
			c.Message = fmt.Sprintf("cannot read stored responses: %v %v", err1, err2)
			h.check(c)
			continue
		}
		if d := compare.Exact(a, b, results.CompareOptions(e.Kind)); d != nil {
			c.Message = fmt.Sprintf("response differs from %s's: first difference at %s", h.p.Reference, d)
			c.Path, c.Want, c.Got = d.Path, d.Want, d.Got
		} else {
			c.Passed = true
			c.Message = "equal to " + h.p.Reference
		}
		h.check(c)
	}
}

// crossBackend compares the reference variant's inference responses on each
// backend with those on the first backend, within the plan's tolerance.
func (h *harness) crossBackend(backends []backend) {
	if len(backends) < 2 {
		return
	}
	read := func(rel string) ([]byte, error) { return os.ReadFile(h.f.Path(rel)) }
	first := map[string]results.Exchange{}
	for _, e := range h.r.Exchanges {
		if e.Backend == backends[0].Name && e.Variant == h.p.Reference && e.Kind == results.KindInference && e.Error == "" {
			first[e.Key()] = e
		}
	}
	for _, e := range h.r.Exchanges {
		if e.Backend == backends[0].Name || e.Variant != h.p.Reference || e.Kind != results.KindInference || e.Error != "" {
			continue
		}
		re, ok := first[e.Key()]
		if !ok {
			continue
		}
		a, err1 := results.LoadResponse(read, re)
		b, err2 := results.LoadResponse(read, e)
		if err1 != nil || err2 != nil {
			continue
		}
		res := compare.Approx(a, b, h.p.Tolerance.Tolerance)
		x := results.CrossCheck{Model: e.Model, Step: e.Step, Variant: e.Variant, Backend: e.Backend, Against: re.Backend,
			Exchange: e.ID, Reference: re.ID, Within: res.Within, Numbers: res.Numbers, MaxAbs: res.MaxAbs, Required: h.p.Tolerance.Required}
		if res.Diff != nil {
			x.Path, x.Want, x.Got = res.Diff.Path, res.Diff.Want, res.Diff.Got
		}
		h.r.CrossBackend = append(h.r.CrossBackend, x)
	}
}

// recordFiles puts executables, ggml libraries, weights and inputs into the
// manifest with their hashes.
func (h *harness) recordFiles() {
	for _, v := range h.p.Variants {
		if b := h.bins[v.Name]; b != nil && b.Err == nil {
			if err := h.m.AddFile(manifest.RoleExecutable, v.Name, b.Binary); err != nil {
				h.r.Notes = append(h.r.Notes, err.Error())
			}
		}
	}
	for _, dir := range h.ggmlDirs() {
		matches, _ := filepath.Glob(filepath.Join(dir, "*.so*"))
		sort.Strings(matches)
		for _, lib := range matches {
			_ = h.m.AddFile(manifest.RoleLibrary, filepath.Base(dir), lib)
		}
	}
	for _, model := range h.p.Models {
		if _, err := os.Stat(model.Path); err == nil {
			if err := h.m.AddFile(manifest.RoleWeights, model.ID, model.Path); err != nil {
				h.r.Notes = append(h.r.Notes, err.Error())
			}
		}
		for _, f := range model.Request.Files {
			_ = h.m.AddFile(manifest.RoleInput, model.ID, h.p.Resolve(f))
		}
	}
}

// ggmlDirs are the folders the servers load ggml from: AUDIOPROOF_GGML_DIR,
// or the folders 'make deps' fills under .deps/ggml.
func (h *harness) ggmlDirs() []string {
	if h.o.LibraryDirs != nil {
		return h.o.LibraryDirs
	}
	if d := os.Getenv("AUDIOPROOF_GGML_DIR"); d != "" {
		return []string{d}
	}
	var out []string
	entries, _ := os.ReadDir(filepath.Join(h.repo, ".deps", "ggml"))
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(h.repo, ".deps", "ggml", e.Name()))
		}
	}
	return out
}
