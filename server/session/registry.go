package session

import (
	"fmt"
	"sort"
	"sync"
)

var (
	familiesMu sync.RWMutex
	families   = map[string]Family{}
)

// Register makes a family available by name. Families call it from init;
// registering a name twice is a programming error and panics.
func Register(f Family) {
	familiesMu.Lock()
	defer familiesMu.Unlock()
	if _, dup := families[f.Name()]; dup {
		panic(fmt.Sprintf("session: family %q registered twice", f.Name()))
	}
	families[f.Name()] = f
}

// Lookup returns the family registered under name.
func Lookup(name string) (Family, bool) {
	familiesMu.RLock()
	defer familiesMu.RUnlock()
	f, ok := families[name]
	return f, ok
}

// Names lists the registered families, sorted.
func Names() []string {
	familiesMu.RLock()
	defer familiesMu.RUnlock()
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
