package ggml

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/ebitengine/purego"
)

// LogLevel is enum ggml_log_level.
type LogLevel int32

// ggml's log levels (ggml.h).
const (
	LogNone  LogLevel = 0
	LogDebug LogLevel = 1
	LogInfo  LogLevel = 2
	LogWarn  LogLevel = 3
	LogError LogLevel = 4
	logCont  LogLevel = 5 // continues the previous message
)

// String names the level.
func (l LogLevel) String() string {
	switch l {
	case LogDebug:
		return "debug"
	case LogInfo:
		return "info"
	case LogWarn:
		return "warn"
	case LogError:
		return "error"
	}
	return fmt.Sprintf("level%d", int32(l))
}

var (
	// logMu guards logSink, logLine and logLevel.
	logMu    sync.Mutex
	logSink  func(level LogLevel, msg string)
	logLine  strings.Builder
	logLevel LogLevel

	logCallbackOnce sync.Once
	logCallback     uintptr
)

// SetLogger routes ggml's own log lines (backend loading, Vulkan device
// reports, errors) to fn, one call per complete line without the newline.
// nil restores the default: info and above go to standard error. Set it
// before Open to see the backend-loading messages.
func SetLogger(fn func(level LogLevel, msg string)) {
	logMu.Lock()
	logSink = fn
	logMu.Unlock()
}

func defaultSink(level LogLevel, msg string) {
	if level >= LogInfo {
		fmt.Fprintln(os.Stderr, msg)
	}
}

// onLog is the C log callback:
//
//	typedef void (*ggml_log_callback)(enum ggml_log_level level, const char * text, void * user_data);
func onLog(level, text, _ uintptr) {
	lv := LogLevel(int32(level))
	s := goString(text)
	logMu.Lock()
	sink := logSink
	if sink == nil {
		sink = defaultSink
	}
	if lv != logCont {
		logLevel = lv
	}
	var lines []string
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			logLine.WriteString(s)
			break
		}
		logLine.WriteString(s[:i])
		lines = append(lines, logLine.String())
		logLine.Reset()
		s = s[i+1:]
	}
	cur := logLevel
	logMu.Unlock()
	for _, line := range lines {
		sink(cur, line)
	}
}

// installLogger points ggml's log callback at onLog (one purego callback per
// process: they are never freed).
func (l *Library) installLogger() error {
	addr, err := lookup("ggml_log_set", l.base, l.loader)
	if err != nil {
		return err
	}
	// void ggml_log_set(ggml_log_callback log_callback, void * user_data);
	var logSet func(cb, user uintptr)
	purego.RegisterFunc(&logSet, addr)
	logCallbackOnce.Do(func() { logCallback = purego.NewCallback(onLog) })
	logSet(logCallback, 0)
	return nil
}
