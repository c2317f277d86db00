//go:build !nodocker

package main

import tclog "github.com/testcontainers/testcontainers-go/log"

// quietDocker silences testcontainers-go's own logger, which prints a
// banner (engine version, session and process ids) the first time a
// process talks to the engine: the demo's output is for people.
func quietDocker() { tclog.SetDefault(tclog.NewNoopLogger()) }
