//go:build !race

package silero

const raceEnabled = false
