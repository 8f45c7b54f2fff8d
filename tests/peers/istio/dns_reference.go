// The DNS proxy of Istio's agent (istio.io/istio/pkg/dns/client), serving a name table read
// from a file, so that Outrider's tests can compare its answers with Outrider's for the same
// table. Usage: istio-dns-reference ADDRESS NAMESPACE DOMAIN TABLE.json (protobuf JSON of
// istio.networking.nds.v1.NameTable); prints "ready" once it serves.
package main

import (
	"fmt"
	"os"

	"google.golang.org/protobuf/encoding/protojson"

	dnsclient "istio.io/istio/pkg/dns/client"
	dnsProto "istio.io/istio/pkg/dns/proto"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: istio-dns-reference ADDRESS NAMESPACE DOMAIN TABLE.json")
		os.Exit(2)
	}
	address, namespace, domain, file := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var table dnsProto.NameTable
	if err := protojson.Unmarshal(data, &table); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server, err := dnsclient.NewLocalDNSServer(namespace, domain, address)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server.UpdateLookupTable(&table)
	server.StartDNS()
	fmt.Println("ready")
	select {}
}
