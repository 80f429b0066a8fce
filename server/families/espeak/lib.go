package espeak

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// libName is the shared library opened at run time (Debian: libespeak-ng1).
var libName = "libespeak-ng.so.1"

// Values from espeak-ng's speak_lib.h (API revision 12, libespeak-ng 1.51).
const (
	audioOutputSynchronous = 2      // espeak_AUDIO_OUTPUT: synthesis runs inside espeak_Synth
	initializeDontExit     = 0x8000 // espeakINITIALIZE_DONT_EXIT: return instead of exit(1) on bad data
	charsUTF8              = 1      // espeakCHARS_UTF8
	positionCharacter      = 1      // espeak_POSITION_TYPE POS_CHARACTER

	paramRate    = 1 // espeakRATE, words per minute
	paramVolume  = 2 // espeakVOLUME, 0..200, 100 = normal
	paramPitch   = 3 // espeakPITCH, 0..100, 50 = normal
	paramRange   = 4 // espeakRANGE, 0..100, 50 = normal
	paramWordGap = 7 // espeakWORDGAP, units of 10 ms
	// espeakPUNCTUATION (5) and espeakCAPITALS (6) return EE_INTERNAL_ERROR
	// in synchronous mode (1.51) and espeakINTONATION (9) crashes; this
	// package never sets them, so they keep their defaults (off).

	eeOK       = 0 // EE_OK
	eeNotFound = 2 // EE_NOT_FOUND

	// rateNormal is espeakRATE_NORMAL, the words per minute of speed 1.0.
	rateNormal = 175
)

// errLibMissing is returned (wrapped) when libespeak-ng cannot be opened.
var errLibMissing = errors.New("libespeak-ng.so.1 not found: run `make deps` (installs the Debian package libespeak-ng1)")

// api holds the C functions of one loaded copy of the library.
type api struct {
	// int espeak_Initialize(espeak_AUDIO_OUTPUT output, int buflength, const char *path, int options);
	initialize func(output, buflength int32, path *byte, options int32) int32
	// void espeak_SetSynthCallback(t_espeak_callback *SynthCallback);
	setSynthCallback func(cb uintptr)
	// espeak_ERROR espeak_SetVoiceByName(const char *name);
	setVoiceByName func(name *byte) int32
	// espeak_ERROR espeak_SetParameter(espeak_PARAMETER parameter, int value, int relative);
	setParameter func(param, value, relative int32) int32
	// espeak_ERROR espeak_Synth(const void *text, size_t size, unsigned int position,
	//     espeak_POSITION_TYPE position_type, unsigned int end_position, unsigned int flags,
	//     unsigned int *unique_identifier, void *user_data);
	synth func(text *byte, size uintptr, position uint32, positionType int32, endPosition, flags uint32, uid *uint32, userData uintptr) int32
	// const espeak_VOICE **espeak_ListVoices(espeak_VOICE *voice_spec);
	listVoices func(spec uintptr) unsafe.Pointer
	// espeak_ERROR espeak_Terminate(void);
	terminate func() int32
}

// symbols are the functions api binds, checked before binding because
// purego panics on a missing one.
var symbols = []string{"espeak_Initialize", "espeak_SetSynthCallback", "espeak_SetVoiceByName",
	"espeak_SetParameter", "espeak_Synth", "espeak_ListVoices", "espeak_Terminate"}

// libcName is the C library whose rand() libespeak-ng uses.
const libcName = "libc.so.6"

// randSeed is the libc rand() seed set before every synthesis: espeak-ng
// draws the noise of breathy and unvoiced sounds from rand().
const randSeed = 1

// engine is the process-wide access to libespeak-ng. mu serialises every
// use of the library in the process: one synthesis (or voice listing) at a
// time, whatever model or session asks.
//
// Why a fresh copy of the library per use: libespeak-ng keeps synthesis
// state in C statics that no API call resets (in wavegen.c: the pitch
// flutter position, the automatic gain, the cycle counter, resonator
// memories). Two syntheses of the same text in one process therefore give
// different samples, and the first one after loading matches the espeak-ng
// command line. To make output depend only on the request, each use loads a
// private copy of the shared object (a file copy under a unique name, so the
// dynamic loader maps new statics), initialises it, runs, then calls
// espeak_Terminate and unloads it. That costs a few milliseconds.
type engine struct {
	mu       sync.Mutex
	srcPath  string  // the system libespeak-ng.so.1, resolved once
	callback uintptr // the one purego callback of the process
	srand    func(seed uint32)
	current  *synthesis // the synthesis the callback feeds
}

var eng engine

// prepareLocked finds the library and makes the callback, once. A failure
// is retried on the next call, so installing the package fixes a running
// server. Caller holds eng.mu.
func (e *engine) prepareLocked() error {
	if e.srcPath != "" {
		return nil
	}
	lib, err := purego.Dlopen(libName, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return fmt.Errorf("%w (%v)", errLibMissing, err)
	}
	src, err := mappedPath(libName)
	purego.Dlclose(lib)
	if err != nil {
		return err
	}
	libc, err := purego.Dlopen(libcName, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("cannot open %s for srand: %v", libcName, err)
	}
	purego.RegisterLibFunc(&e.srand, libc, "srand")
	if e.callback == 0 {
		// purego callbacks are never freed and limited in number: this is
		// the only one the process makes. It finds its synthesis through
		// e.current, and every library copy is given this same pointer.
		e.callback = purego.NewCallback(synthCallback)
	}
	e.srcPath = src
	return nil
}

// mappedPath returns the file the dynamic loader mapped for a library
// opened by soname, from /proc/self/maps.
func mappedPath(soname string) (string, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return "", fmt.Errorf("cannot locate %s: %v", soname, err)
	}
	stem := strings.TrimSuffix(soname, ".1")
	for line := range strings.Lines(string(maps)) {
		f := strings.Fields(line)
		if len(f) >= 6 && strings.HasPrefix(filepath.Base(f[5]), stem) {
			return f[5], nil
		}
	}
	return "", fmt.Errorf("cannot locate %s: it is loaded but not in /proc/self/maps", soname)
}

// instance is one private, initialised copy of the library.
type instance struct {
	lib  uintptr
	fns  api
	rate int
}

// openLocked loads a private copy of the library and initialises it with
// dataDir ("" = the library's built-in default). The caller closes it.
// Caller holds eng.mu.
func (e *engine) openLocked(dataDir string) (*instance, error) {
	if err := e.prepareLocked(); err != nil {
		return nil, err
	}
	lib, err := loadCopy(e.srcPath)
	if err != nil {
		return nil, err
	}
	for _, s := range symbols {
		if _, err := purego.Dlsym(lib, s); err != nil {
			purego.Dlclose(lib)
			return nil, fmt.Errorf("%s has no symbol %s: install libespeak-ng1 1.51 or newer (%v)", e.srcPath, s, err)
		}
	}
	in := &instance{lib: lib}
	f := &in.fns
	purego.RegisterLibFunc(&f.initialize, lib, "espeak_Initialize")
	purego.RegisterLibFunc(&f.setSynthCallback, lib, "espeak_SetSynthCallback")
	purego.RegisterLibFunc(&f.setVoiceByName, lib, "espeak_SetVoiceByName")
	purego.RegisterLibFunc(&f.setParameter, lib, "espeak_SetParameter")
	purego.RegisterLibFunc(&f.synth, lib, "espeak_Synth")
	purego.RegisterLibFunc(&f.listVoices, lib, "espeak_ListVoices")
	purego.RegisterLibFunc(&f.terminate, lib, "espeak_Terminate")
	var path *byte
	if dataDir != "" {
		path = cString(dataDir)
	}
	rate := f.initialize(audioOutputSynchronous, 0, path, initializeDontExit)
	runtime.KeepAlive(path)
	if rate <= 0 {
		in.close()
		return nil, fmt.Errorf("espeak_Initialize with data folder %q failed (returned %d): check that it holds espeak-ng-data (phontab, phondata, voices)", dataDir, rate)
	}
	in.rate = int(rate)
	f.setSynthCallback(e.callback)
	return in, nil
}

// loadCopy copies the shared object to a new temporary file and opens it
// with local symbols, so that it gets its own static data. The file is
// removed at once; the mapping stays.
func loadCopy(src string) (uintptr, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return 0, fmt.Errorf("cannot read %s: %v", src, err)
	}
	tmp, err := os.CreateTemp("", "audioproof-libespeak-ng-*.so")
	if err != nil {
		return 0, fmt.Errorf("cannot write a private copy of %s: %v (set TMPDIR to a writable folder)", src, err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		return 0, fmt.Errorf("cannot write a private copy of %s: %v", src, errors.Join(werr, cerr))
	}
	lib, err := purego.Dlopen(tmp.Name(), purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return 0, fmt.Errorf("cannot load the private copy %s of %s: %v (if %s is mounted noexec, set TMPDIR to a folder that allows executables)", tmp.Name(), src, err, os.TempDir())
	}
	return lib, nil
}

// close frees the library's memory and unloads the copy.
func (in *instance) close() {
	if in.fns.terminate != nil {
		in.fns.terminate()
	}
	purego.Dlclose(in.lib)
}

// cString returns s as a NUL-terminated C string in Go memory; the caller
// keeps it alive across the call and C must not retain it.
func cString(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}

// goString copies a NUL-terminated C string.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// synthesis is the state of the one running espeak_Synth call, which the
// callback fills. onChunk, when set, sees each buffer as it arrives and may
// stop the synthesis by returning an error.
type synthesis struct {
	samples []float32
	onChunk func(chunk []float32) error
	err     error // first error from onChunk or a panic in the callback
}

// synthCallback is espeak's t_espeak_callback:
//
//	int SynthCallback(short *wav, int numsamples, espeak_EVENT *events);
//
// It runs on the goroutine that called espeak_Synth (synchronous mode), with
// eng.mu held by that goroutine. Returning 1 aborts the synthesis.
func synthCallback(wav *int16, numSamples int32, events unsafe.Pointer) (abort int32) {
	s := eng.current
	if s == nil || s.err != nil {
		return 1
	}
	defer func() {
		// A panic must not unwind through C frames.
		if r := recover(); r != nil {
			s.err = fmt.Errorf("espeak callback panicked: %v", r)
			abort = 1
		}
	}()
	if wav == nil || numSamples <= 0 {
		return 0 // end of synthesis, or an events-only call
	}
	pcm := unsafe.Slice(wav, int(numSamples))
	start := len(s.samples)
	for _, v := range pcm {
		s.samples = append(s.samples, float32(v)/32768)
	}
	if s.onChunk != nil {
		if err := s.onChunk(s.samples[start:]); err != nil {
			s.err = err
			return 1
		}
	}
	return 0
}
