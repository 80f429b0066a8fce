package main

import (
	"fmt"
	"strconv"

	"github.com/audioproof/audioproof/server/config"
)

// options are the command-line flags, exactly as the wire contract spells
// them: `--name value` for value flags, presence for switches. A flag given
// on the command line overrides the config.
type options struct {
	configPath   string
	host         *string
	port         *int
	backend      *string
	device       *int
	threads      *int
	busyTimeout  *int64
	maxLoaded    *int
	idleUnload   *int64
	minFreeMem   *int64
	corsOrigins  *string
	ui           *bool
	uiManagement bool
	parallelJobs bool
	log          bool
	logFile      string
	ggmlDir      string
	listDevices  bool
	version      bool
	help         bool
}

const usage = `usage: audioproof-server [flags]

Serves speech models (TTS, VAD, ASR, diarization) over the audio.cpp server's
HTTP API. Without --config it serves the embedded default config (espeak TTS and
Silero VAD); run 'make deps' once to fetch the ggml libraries and weights.

flags:
  --config <path>            JSON config (default: the embedded server/default.json)
  --host <ipv4>              listen address (default 127.0.0.1)
  --port <n>                 listen port (default 8080)
  --backend cpu|vulkan|cuda  ggml backend (default cpu)
  --device <n>               device index within the backend (default 0)
  --threads <n>              CPU threads per computation (default 1)
  --busy-timeout-ms <ms>     wait for a busy model at most this long (default 300000, 0 = no limit)
  --max-loaded-models <n>    keep at most n models loaded, evicting idle ones (0 = no limit)
  --idle-unload-ms <ms>      unload models idle this long (0 = never)
  --min-free-memory-mb <mb>  refuse a load whose estimate (1.5 x weights + 128 MiB) plus this
                             headroom exceeds the free memory (0 = guard off)
  --cors-origins "*"|""      allow any browser origin, or none (default "")
  --ui, --no-ui              accepted for compatibility; audioproof has no WebUI
  --ui-management            enable /v1/models/load and /v1/models/unload
  --parallel-jobs            select the parallel runtime (slots per model, FIFO admission)
  --ggml-dir <dir>           folder with the ggml libraries (env AUDIOPROOF_GGML_DIR;
                             default: the folder 'make deps' fills)
  --log                      log one line per request
  --log-file <path>          write the log to a file instead of stderr
  --list-devices             print the ggml devices and exit
  --version                  print the version and exit
  --help, -h                 print this help and exit
`

func parseFlags(args []string) (*options, error) {
	o := &options{}
	for i := 0; i < len(args); i++ {
		name := args[i]
		value := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", name)
			}
			i++
			return args[i], nil
		}
		str := func(dst **string) error {
			v, err := value()
			if err != nil {
				return err
			}
			*dst = &v
			return nil
		}
		integer := func(min int64) (int64, error) {
			v, err := value()
			if err != nil {
				return 0, err
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < min {
				return 0, fmt.Errorf("%s needs an integer >= %d, got %q", name, min, v)
			}
			return n, nil
		}
		var err error
		switch name {
		case "--config":
			o.configPath, err = value()
		case "--host":
			err = str(&o.host)
		case "--backend":
			err = str(&o.backend)
		case "--cors-origins":
			err = str(&o.corsOrigins)
		case "--port":
			var n int64
			if n, err = integer(1); err == nil {
				if n > 65535 {
					err = fmt.Errorf("--port must be 1..65535, got %d", n)
				}
				p := int(n)
				o.port = &p
			}
		case "--device":
			var n int64
			if n, err = integer(0); err == nil {
				d := int(n)
				o.device = &d
			}
		case "--threads":
			var n int64
			if n, err = integer(1); err == nil {
				t := int(n)
				o.threads = &t
			}
		case "--busy-timeout-ms":
			var n int64
			if n, err = integer(0); err == nil {
				o.busyTimeout = &n
			}
		case "--max-loaded-models":
			var n int64
			if n, err = integer(0); err == nil {
				m := int(n)
				o.maxLoaded = &m
			}
		case "--idle-unload-ms":
			var n int64
			if n, err = integer(0); err == nil {
				o.idleUnload = &n
			}
		case "--min-free-memory-mb":
			var n int64
			if n, err = integer(0); err == nil {
				if n > config.MaxMinFreeMemoryMb {
					err = fmt.Errorf("--min-free-memory-mb must be 0..%d, got %d", config.MaxMinFreeMemoryMb, n)
				}
				o.minFreeMem = &n
			}
		case "--ui":
			t := true
			o.ui = &t
		case "--no-ui":
			f := false
			o.ui = &f
		case "--ui-management":
			o.uiManagement = true
		case "--parallel-jobs":
			o.parallelJobs = true
		case "--ggml-dir":
			o.ggmlDir, err = value()
		case "--log":
			o.log = true
		case "--log-file":
			o.logFile, err = value()
		case "--list-devices":
			o.listDevices = true
		case "--version":
			o.version = true
		case "--help", "-h":
			o.help = true
		default:
			err = fmt.Errorf("unknown flag %q (see --help)", name)
		}
		if err != nil {
			return nil, err
		}
	}
	return o, nil
}
