//go:build nodocker

package main

// quietDocker has nothing to silence in a build without the docker
// provider.
func quietDocker() {}
