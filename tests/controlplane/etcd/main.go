// Command etcd is etcd's server entry point, as built by the upstream main
// package, compiled here from the go.etcd.io/etcd/server/v3 module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
