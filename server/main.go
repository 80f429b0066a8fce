// Command audioproof-server serves speech models over the audio.cpp
// server's HTTP API, with the legacy runtime or, with --parallel-jobs, the
// parallel runtime. See README.md.
package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"syscall"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/runtimes/legacy"
	"github.com/audioproof/audioproof/runtimes/parallel"
	"github.com/audioproof/audioproof/server/config"
	"github.com/audioproof/audioproof/server/ggml"
	"github.com/audioproof/audioproof/server/httpapi"
	"github.com/audioproof/audioproof/server/session"

	_ "github.com/audioproof/audioproof/server/families/espeak"
	_ "github.com/audioproof/audioproof/server/families/fixture"
	_ "github.com/audioproof/audioproof/server/families/silero"
)

//go:embed default.json
var defaultConfig []byte

// version is set at build time with -ldflags "-X main.version=..."; when
// empty it comes from the module's VCS stamp.
var version = ""

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "audioproof server failed: %v\n", err)
		os.Exit(1)
	}
}

func versionString() string {
	v := version
	if v == "" {
		v = "dev"
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 12 {
					v = "dev-" + s.Value[:12]
				}
			}
		}
	}
	return fmt.Sprintf("audioproof %s (ggml %s, commit %s)", v, ggml.WantVersion, ggml.WantCommit)
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	if o.help {
		fmt.Fprint(stdout, usage)
		return nil
	}
	if o.version {
		fmt.Fprintln(stdout, versionString())
		return nil
	}
	cfg, err := loadConfig(o)
	if err != nil {
		return err
	}
	logger, closeLog, err := newLogger(o, stderr)
	if err != nil {
		return err
	}
	defer closeLog()

	if cfg.Backend == "vulkan" || o.listDevices {
		logf := func(format string, args ...any) { logger.Info(fmt.Sprintf(format, args...)) }
		if _, err := ggml.PrepareVulkanEnv(logf); err != nil {
			if cfg.Backend == "vulkan" {
				return err
			}
			logger.Warn("Vulkan not prepared", "err", err)
		}
	}
	ggml.SetLogger(func(level ggml.LogLevel, msg string) {
		switch {
		case level >= ggml.LogError:
			logger.Error(msg, "source", "ggml")
		case level >= ggml.LogWarn:
			logger.Warn(msg, "source", "ggml")
		default:
			logger.Debug(msg, "source", "ggml")
		}
	})
	dir := o.ggmlDir
	if dir == "" {
		dir = ggml.DefaultDir()
	}
	lib, err := ggml.Open(dir)
	if err != nil {
		return err
	}
	if o.listDevices {
		return lib.DeviceTable(stdout)
	}
	backend, err := lib.NewBackend(cfg.Backend, cfg.Device, cfg.Threads)
	if err != nil {
		return err
	}
	defer backend.Close()

	ropts := runtimes.Options{
		Config: cfg,
		Env:    session.Env{Backend: cfg.Backend, Device: cfg.Device, Threads: cfg.Threads, Compute: backend, Logger: logger},
		Logger: logger,
	}
	var rt runtimes.Runtime
	if o.parallelJobs {
		fmt.Fprintln(stderr, parallel.StartupWarning)
		rt, err = parallel.New(ropts)
	} else {
		rt, err = legacy.New(ropts)
	}
	if err != nil {
		return err
	}
	defer rt.Close()
	if err := rt.Start(context.Background()); err != nil {
		return err
	}

	// Signals are caught before the listener exists, so a client that sees
	// the server answer can always stop it cleanly.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	srv := httpapi.New(httpapi.Options{Config: cfg, Runtime: rt, Logger: logger, LogRequests: o.log})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "audioproof listening on http://%s (runtime %s, backend %s, %d models)\n", ln.Addr(), rt.Name(), cfg.Backend, len(cfg.Models))

	select {
	case err := <-served:
		return err
	case sig := <-sigs:
		logger.Info("shutting down: draining requests", "signal", sig.String())
	}
	// A second signal changes nothing: the drain below owns every worker and
	// the runtime is closed only after it.
	go func() {
		for sig := range sigs {
			logger.Info("already shutting down; waiting for running requests", "signal", sig.String())
		}
	}()
	if err := srv.Shutdown(context.Background()); err != nil {
		return err
	}
	<-served
	return nil
}

// loadConfig reads --config (or the embedded default) and applies the flags.
func loadConfig(o *options) (*config.Config, error) {
	var cfg *config.Config
	var err error
	if o.configPath != "" {
		cfg, err = config.Load(o.configPath)
	} else {
		cfg, err = config.Parse(defaultConfig, depsDir())
		if err != nil {
			err = fmt.Errorf("embedded default config: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	if o.host != nil {
		cfg.Host = *o.host
	}
	if o.port != nil {
		cfg.Port = *o.port
	}
	if o.backend != nil {
		cfg.Backend = *o.backend
	}
	if o.device != nil {
		cfg.Device = *o.device
	}
	if o.threads != nil {
		cfg.Threads = *o.threads
	}
	if o.busyTimeout != nil {
		cfg.BusyTimeoutMs = *o.busyTimeout
	}
	if o.maxLoaded != nil {
		cfg.MaxLoadedModels = *o.maxLoaded
	}
	if o.idleUnload != nil {
		cfg.IdleUnloadMs = *o.idleUnload
	}
	if o.minFreeMem != nil {
		cfg.MinFreeMemoryMb = *o.minFreeMem
	}
	if o.corsOrigins != nil {
		cfg.CORSOrigins = *o.corsOrigins
	}
	if o.ui != nil {
		cfg.UI = *o.ui
	}
	if o.uiManagement {
		cfg.UIManagement = true
	}
	if err := config.ValidateHost(cfg.Host); err != nil {
		return nil, err
	}
	if err := config.ValidateBackend(cfg.Backend); err != nil {
		return nil, err
	}
	if cfg.CORSOrigins != "" && cfg.CORSOrigins != "*" {
		return nil, fmt.Errorf("--cors-origins must be \"*\" or \"\", got %q", cfg.CORSOrigins)
	}
	return cfg, nil
}

// depsDir is the folder `make deps` fills (.deps), which the embedded config's
// relative paths resolve against: $AUDIOPROOF_DEPS_DIR, else the nearest
// .deps above the working directory or the executable.
func depsDir() string {
	if d := os.Getenv("AUDIOPROOF_DEPS_DIR"); d != "" {
		return d
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, start := range starts {
		for d := start; ; d = filepath.Dir(d) {
			if st, err := os.Stat(filepath.Join(d, ".deps")); err == nil && st.IsDir() {
				return filepath.Join(d, ".deps")
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return ".deps"
}

func newLogger(o *options, stderr io.Writer) (*slog.Logger, func(), error) {
	w := stderr
	closeFn := func() {}
	if o.logFile != "" {
		f, err := os.OpenFile(o.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("cannot open log file: %w", err)
		}
		w = f
		closeFn = func() { f.Close() }
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})), closeFn, nil
}
