package espeak

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"unsafe"
)

// cVoice mirrors espeak_VOICE from speak_lib.h on 64-bit Linux:
//
//	typedef struct {
//	    const char *name;       // offset  0: e.g. "English_(America)"
//	    const char *languages;  // offset  8: {priority byte, "lang\0"}..., then a 0 byte
//	    const char *identifier; // offset 16: file under espeak-ng-data, e.g. "gmw/en-US"
//	    unsigned char gender;   // offset 24
//	    unsigned char age;      // offset 25
//	    unsigned char variant;  // offset 26
//	    unsigned char xx1;      // offset 27
//	    int score;              // offset 28
//	    void *spare;            // offset 32
//	} espeak_VOICE;             // size 40
//
// The layout is checked by TestVoiceStructLayout.
type cVoice struct {
	name       *byte
	languages  *byte
	identifier *byte
	gender     uint8
	age        uint8
	variant    uint8
	xx1        uint8
	score      int32
	spare      unsafe.Pointer
}

// voiceInfo is one voice as espeak lists it.
type voiceInfo struct {
	Name       string
	Identifier string     // file under espeak-ng-data, e.g. "gmw/en-US"
	Languages  []language // in the order espeak gives them
}

// language is one entry of a voice's languages field.
type language struct {
	Name     string
	Priority int // lower = the voice is preferred for this language
}

// listVoicesLocked reads espeak_ListVoices(NULL): a NULL-terminated array of
// espeak_VOICE pointers owned by the library (valid until the next call).
// Caller holds eng.mu.
func (in *instance) listVoices() []voiceInfo {
	arr := in.fns.listVoices(0)
	if arr == nil {
		return nil
	}
	var out []voiceInfo
	for i := 0; ; i++ {
		vp := *(**cVoice)(unsafe.Add(arr, uintptr(i)*unsafe.Sizeof(uintptr(0))))
		if vp == nil {
			break
		}
		out = append(out, voiceInfo{
			Name:       goString(vp.name),
			Identifier: goString(vp.identifier),
			Languages:  parseLanguages(vp.languages),
		})
	}
	return out
}

// parseLanguages decodes the languages field: repeated {priority byte,
// NUL-terminated name}, ended by a zero priority byte.
func parseLanguages(p *byte) []language {
	if p == nil {
		return nil
	}
	var langs []language
	for off := 0; off < 4096; {
		prio := *(*byte)(unsafe.Add(unsafe.Pointer(p), off))
		if prio == 0 {
			break
		}
		name := goString((*byte)(unsafe.Add(unsafe.Pointer(p), off+1)))
		if name == "" {
			break
		}
		langs = append(langs, language{Name: name, Priority: int(prio)})
		off += 1 + len(name) + 1
	}
	return langs
}

// voiceTable maps every name a request may give as its voice (lower case)
// to the espeak voice identifier it selects. Names are:
//   - the voice file's base name, which is what `espeak-ng -v` takes
//     ("en-us" for gmw/en-US, "en" for gmw/en, "de", "fr", "cmn");
//   - every language a voice declares that is not already such a name
//     ("en-gb", "fr-fr", "zh"), mapped to the voice espeak prefers for it
//     (lowest priority number, then the first listed).
//
// Selecting by identifier (espeak_SetVoiceByName("gmw/en-US")) always finds
// the file; some language names alone are not found by that call.
func voiceTable(voices []voiceInfo) map[string]string {
	table := map[string]string{}
	for _, v := range voices {
		if v.Identifier == "" || strings.HasPrefix(v.Identifier, "mb/") {
			continue // mbrola voices need separately installed databases
		}
		base := strings.ToLower(path.Base(v.Identifier))
		if _, dup := table[base]; !dup {
			table[base] = v.Identifier
		}
	}
	best := map[string]int{}
	for _, v := range voices {
		if v.Identifier == "" || strings.HasPrefix(v.Identifier, "mb/") {
			continue
		}
		for _, l := range v.Languages {
			name := strings.ToLower(l.Name)
			if name == "" || name == "variant" {
				continue
			}
			if prio, seen := best[name]; seen {
				if l.Priority < prio {
					best[name], table[name] = l.Priority, v.Identifier
				}
				continue
			}
			if _, isFile := table[name]; isFile {
				continue
			}
			best[name], table[name] = l.Priority, v.Identifier
		}
	}
	return table
}

// sortedNames returns the keys of a voice table, sorted.
func sortedNames(table map[string]string) []string {
	names := make([]string, 0, len(table))
	for n := range table {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// resolveDataDir returns the espeak-ng data folder to initialise with for a
// model path. espeak_Initialize takes either the folder that contains
// "espeak-ng-data" or that data folder itself (it tries <path>/espeak-ng-data
// first, then <path>); it then uses whatever directory it found, and with a
// wrong one it fails later or exits the process. So the folder is checked
// here, and the data folder itself is what gets passed. An empty path means
// the library's built-in default.
func resolveDataDir(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	for _, dir := range []string{path, filepath.Join(path, "espeak-ng-data")} {
		if isDataDir(dir) {
			abs, err := filepath.Abs(dir)
			if err != nil {
				return "", err
			}
			return abs, nil
		}
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("espeak_tts: model path %q: %w (use the espeak-ng data folder, e.g. /usr/lib/x86_64-linux-gnu/espeak-ng-data from the Debian package espeak-ng-data)", path, err)
	}
	return "", fmt.Errorf("espeak_tts: model path %q is not an espeak-ng data folder: neither it nor %s holds phontab, phondata and voices/ or lang/ (use e.g. /usr/lib/x86_64-linux-gnu/espeak-ng-data)",
		path, filepath.Join(path, "espeak-ng-data"))
}

// isDataDir reports whether dir looks like espeak-ng-data: the compiled
// phoneme tables and a voice folder.
func isDataDir(dir string) bool {
	for _, f := range []string{"phontab", "phondata", "phonindex"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.IsDir() {
			return false
		}
	}
	for _, d := range []string{"voices", "lang"} {
		if st, err := os.Stat(filepath.Join(dir, d)); err == nil && st.IsDir() {
			return true
		}
	}
	return false
}
