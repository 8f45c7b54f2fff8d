// grpc-orca-backend: the scenario lab's backend written with grpc-go, so the balancers meet
// ORCA as grpc-go's own `orca` package sends it. It serves outrider.echo.v1.Echo on one
// loopback port with a scenario backend's behaviour (latency, exponential jitter, capacity
// slots with a queue beyond them, stalls, warm-up, injected errors) and reports its load with
// orca.ServerMetricsRecorder: per call in the `endpoint-load-metrics-bin` trailer
// (orca.CallMetricsServerOption) and out of band (orca.Register, whose reporting interval
// grpc-go never lets below 30 s). On SIGTERM it writes what it served, per second since its
// first request, as JSON, in the shape `outrider lab-backend` reports. It also serves
// grpc-go's health service, answering SERVING.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The window rps, eps and busy utilization are measured over, as in the Rust lab backend.
const window = time.Second

type stall struct{ at, until, latency time.Duration }

type completion struct {
	at     time.Time
	busy   time.Duration
	failed bool
}

type backend struct {
	name             string
	latency, jitter  time.Duration
	stalls           []stall
	warmupRequests   uint64
	warmupFactor     float64
	started          uint64 // requests given a slot so far
	errorRate        float64
	failFast         bool
	slots            chan struct{}
	capacity         float64
	fixedUtilization float64 // < 0: measured (busy slot-time / capacity)
	fixedQPS         float64 // < 0: measured
	metrics          orca.ServerMetricsRecorder
	request, reply   protoreflect.MessageDescriptor

	mu          sync.Mutex
	rng         *rand.Rand
	epoch       time.Time
	recent      []completion
	errorCredit float64
	ok, failed  []uint64
}

func main() {
	port := flag.Int("port", 0, "loopback port to serve on")
	name := flag.String("name", "grpc-go", "the backend's name, answered in EchoResponse.backend")
	latency := flag.Duration("latency", 0, "service time")
	jitter := flag.Duration("jitter", 0, "mean of the exponential tail added to the service time")
	capacity := flag.Int("capacity", 1000, "requests served at once; more wait")
	errorRate := flag.Float64("error-rate", 0, "fraction of requests answered UNAVAILABLE, spread evenly")
	failFast := flag.Bool("fail-fast", false, "failed requests answer at once")
	withOrca := flag.Bool("orca", true, "report load per call and out of band")
	utilization := flag.Float64("utilization", -1, "report this application utilization instead of the measured one")
	qps := flag.Float64("qps", -1, "report this request rate instead of the measured one")
	report := flag.String("report", "", "where to write the per-second counts on SIGTERM")
	seed := flag.Uint64("seed", 1, "seed of the jitter")
	var stalls []stall
	var warmupRequests uint64
	warmupFactor := 1.0
	flag.Func("warmup", "REQUESTS:FACTOR: the first REQUESTS take FACTOR times as long (a cold backend)", func(text string) error {
		_, err := fmt.Sscanf(text, "%d:%g", &warmupRequests, &warmupFactor)
		return err
	})
	flag.Func("stall", "AT:FOR:LATENCY (durations, from the first request); repeatable", func(text string) error {
		parts := strings.Split(text, ":")
		if len(parts) != 3 {
			return fmt.Errorf("%q is not AT:FOR:LATENCY", text)
		}
		var d [3]time.Duration
		for i, p := range parts {
			v, err := time.ParseDuration(p)
			if err != nil {
				return err
			}
			d[i] = v
		}
		stalls = append(stalls, stall{at: d[0], until: d[0] + d[1], latency: d[2]})
		return nil
	})
	flag.Parse()
	if *capacity < 1 {
		log.Fatalf("capacity %d: at least 1", *capacity)
	}

	file, err := echoFile()
	if err != nil {
		log.Fatalf("echo descriptor: %v", err)
	}
	b := &backend{
		name: *name, latency: *latency, jitter: *jitter, stalls: stalls,
		warmupRequests: warmupRequests, warmupFactor: max(warmupFactor, 0),
		errorRate: *errorRate, failFast: *failFast,
		slots: make(chan struct{}, *capacity), capacity: float64(*capacity),
		fixedUtilization: *utilization, fixedQPS: *qps,
		metrics: orca.NewServerMetricsRecorder(),
		request: file.Messages().ByName("EchoRequest"), reply: file.Messages().ByName("EchoResponse"),
		rng: rand.New(rand.NewPCG(*seed, uint64(*port))),
	}
	b.publish(0, 0, 0)

	var options []grpc.ServerOption
	if *withOrca {
		options = append(options, orca.CallMetricsServerOption(b.metrics))
	}
	server := grpc.NewServer(options...)
	server.RegisterService(&grpc.ServiceDesc{
		ServiceName: "outrider.echo.v1.Echo",
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "Echo", Handler: b.handle}},
		Metadata:    "outrider/echo/v1/echo.proto",
	}, b)
	// grpc-go's health service (SERVING), for probes of a gRPC application.
	healthpb.RegisterHealthServer(server, health.NewServer())
	if *withOrca {
		if err := orca.Register(server, orca.ServiceOptions{ServerMetricsProvider: b.metrics}); err != nil {
			log.Fatalf("orca service: %v", err)
		}
	}
	listener, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	fmt.Printf("ready: %s on %s\n", *name, listener.Addr())

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		server.Stop()
	}()
	if err := server.Serve(listener); err != nil {
		log.Fatalf("serve: %v", err)
	}
	if *report != "" {
		if err := b.writeReport(*report, listener.Addr().(*net.TCPAddr).Port); err != nil {
			log.Fatalf("report: %v", err)
		}
	}
}

// handle is the method handler grpc-go's generated code would be, over dynamic messages:
// decode, then the interceptor chain (where orca attaches its trailer), then echo.
func (b *backend) handle(srv any, ctx context.Context, decode func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	request := dynamicpb.NewMessage(b.request)
	if err := decode(request); err != nil {
		return nil, err
	}
	echo := func(ctx context.Context, request any) (any, error) { return b.echo(ctx, request.(*dynamicpb.Message)) }
	if interceptor == nil {
		return echo(ctx, request)
	}
	return interceptor(ctx, request, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/outrider.echo.v1.Echo/Echo"}, echo)
}

func (b *backend) echo(ctx context.Context, request *dynamicpb.Message) (any, error) {
	field := func(name string) protoreflect.Value {
		return request.Get(b.request.Fields().ByName(protoreflect.Name(name)))
	}
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	start := time.Now()
	fail := b.injectsError()
	serviceTime := b.serviceTime(start) + time.Duration(field("delay_ms").Uint())*time.Millisecond
	if !(fail && b.failFast) {
		time.Sleep(serviceTime)
	}
	<-b.slots
	code := codes.Code(field("fail_with_code").Int())
	fail = fail || code != codes.OK
	busy := time.Since(start)
	b.completed(time.Now(), busy, fail)
	// Asking for the call's recorder is what makes orca's interceptor send the trailer
	// (the server's metrics, merged with what is set here).
	orca.CallMetricsRecorderFromContext(ctx).SetRequestCost("service_ms", float64(busy.Microseconds())/1000)
	if code != codes.OK {
		return nil, status.Error(code, "asked to fail")
	}
	if fail {
		return nil, status.Error(codes.Unavailable, "injected error")
	}
	reply := dynamicpb.NewMessage(b.reply)
	reply.Set(b.reply.Fields().ByName("payload"), field("payload"))
	reply.Set(b.reply.Fields().ByName("backend"), protoreflect.ValueOfString(b.name))
	return reply, nil
}

// serviceTime: the latency (or a stall's) plus an exponential tail, times the warm-up
// factor while the backend is cold. Stalls count from this backend's first request (the
// Rust lab backends share one clock; these start theirs within milliseconds of each other).
func (b *backend) serviceTime(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.epoch.IsZero() {
		b.epoch = now
	}
	since := now.Sub(b.epoch)
	latency := b.latency
	for _, s := range b.stalls {
		if since >= s.at && since < s.until {
			latency = s.latency
		}
	}
	serviceTime := latency + time.Duration(b.rng.ExpFloat64()*float64(b.jitter))
	b.started++
	if b.started <= b.warmupRequests {
		serviceTime = time.Duration(float64(serviceTime) * b.warmupFactor)
	}
	return serviceTime
}

// injectsError spreads failures evenly: credit accrues by the rate, each whole unit fails.
func (b *backend) injectsError() bool {
	if b.errorRate <= 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errorCredit += min(b.errorRate, 1)
	if b.errorCredit >= 1-1e-9 {
		b.errorCredit--
		return true
	}
	return false
}

// completed counts the request in its second and in the last window, and records the
// window's load in the metrics recorder that both ORCA paths read.
func (b *backend) completed(now time.Time, busy time.Duration, failed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	second := int(now.Sub(b.epoch) / time.Second)
	for len(b.ok) <= second {
		b.ok, b.failed = append(b.ok, 0), append(b.failed, 0)
	}
	if failed {
		b.failed[second]++
	} else {
		b.ok[second]++
	}
	b.recent = append(b.recent, completion{at: now, busy: busy, failed: failed})
	drop := 0
	for drop < len(b.recent) && now.Sub(b.recent[drop].at) > window {
		drop++
	}
	b.recent = b.recent[drop:]
	var slotTime time.Duration
	errors := 0
	for _, c := range b.recent {
		slotTime += c.busy
		if c.failed {
			errors++
		}
	}
	used := min(slotTime.Seconds()/(window.Seconds()*b.capacity), 1)
	b.publish(used, float64(len(b.recent)), float64(errors))
}

func (b *backend) publish(utilization, qps, eps float64) {
	if b.fixedUtilization >= 0 {
		utilization = b.fixedUtilization
	}
	if b.fixedQPS >= 0 {
		qps = b.fixedQPS
	}
	b.metrics.SetApplicationUtilization(utilization)
	b.metrics.SetQPS(qps)
	b.metrics.SetEPS(eps)
}

func (b *backend) writeReport(path string, port int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	text, err := json.Marshal(map[string]any{"name": b.name, "port": port, "ok": b.ok, "failed": b.failed})
	if err != nil {
		return err
	}
	return os.WriteFile(path, text, 0o644)
}

// echoFile is proto/outrider/echo/v1/echo.proto as a descriptor, built here so the peer
// needs no protoc: the messages are read and written with dynamicpb.
func echoFile() (protoreflect.FileDescriptor, error) {
	field := func(name string, number int32, kind descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{
			Name: proto.String(name), JsonName: proto.String(name), Number: proto.Int32(number),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), Type: kind.Enum(),
		}
	}
	file := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("outrider/echo/v1/echo.proto"),
		Package: proto.String("outrider.echo.v1"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("EchoRequest"), Field: []*descriptorpb.FieldDescriptorProto{
				field("payload", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING),
				field("delay_ms", 2, descriptorpb.FieldDescriptorProto_TYPE_UINT32),
				field("fail_with_code", 3, descriptorpb.FieldDescriptorProto_TYPE_INT32),
			}},
			{Name: proto.String("EchoResponse"), Field: []*descriptorpb.FieldDescriptorProto{
				field("payload", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING),
				field("backend", 2, descriptorpb.FieldDescriptorProto_TYPE_STRING),
			}},
		},
	}
	return protodesc.NewFile(file, nil)
}
