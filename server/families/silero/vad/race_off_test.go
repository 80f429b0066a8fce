//go:build !race

package vad

const raceEnabled = false
