/*
Copyright The Kubernetes Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package features

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	featuresv1alpha1 "k8s.io/api/features/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/apiserver/pkg/util/feature/reporting"
	"k8s.io/client-go/informers"
	clientset "k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/pkg/util/featureuses"
	"k8s.io/kubernetes/test/integration/framework"
)

const (
	// kubeletUsesScaleEnv sets the number of kubelets of
	// TestKubeletUsesAtScale, which runs only when it is set.
	kubeletUsesScaleEnv = "FEATURE_USES_KUBELETS"
	// kubeletUsesScaleGateEnv is FeatureLifecycle in the run: "on" (the
	// default) or "off", the baseline.
	kubeletUsesScaleGateEnv = "FEATURE_USES_KUBELETS_GATE"
	// kubeletUsesScaleFrontEnv, set by the test for the process it starts,
	// makes that process the kubelets, which reach the servers at this
	// address.
	kubeletUsesScaleFrontEnv = "FEATURE_USES_KUBELETS_FRONT"
)

// TestKubeletUsesAtScale measures what N kubelets reporting their feature uses
// cost kube-apiserver on the kubelet's own path: each kubelet is a user
// system:node:NAME of group system:nodes (a token; a kubelet's client
// certificate names the same user), with its own connection and the kubelet's
// client rate limits, through the Node authorizer, NodeRestriction,
// FeatureRestriction and API Priority and Fairness at their defaults, to the
// Features of kube-system, where the server flow runs. Each has a Node (whose
// kubelet version NodeRestriction checks) and a node lease (which the server
// flow counts kubelets by), watches its Node as a kubelet does, and reports
// as the kubelet does (featureuses.Options), every feature of its gate, as a
// kubelet of this release does. One in fifty runs one feature, the canary,
// off.
//
// The kubelets run in a second process, so that this one's CPU time and
// memory are kube-apiserver's (and the test's few requests), and reach the
// servers through a TCP front that forwards each connection to a live server,
// as a load balancer does. With the gate off (the baseline) the same servers,
// Nodes, leases and watches of Nodes, and no reporter: what a kubelet of the
// gate off does.
//
// Phases: the kubelets start at once; idle; a second kube-apiserver joins
// with the canary off; the first leaves, so that the servers agree and the
// canary's Feature turns off (a transition in progress: the kubelets that run
// it on hold it in WaitForUses). Per phase the test logs kube-apiserver's own
// metrics, the stored writes of the Features, this process's CPU time, peak
// RSS and heap. docs/feature-api.md has the numbers.
func TestKubeletUsesAtScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(kubeletUsesScaleEnv))
	if n <= 0 {
		t.Skipf("set %s to the number of kubelets to run", kubeletUsesScaleEnv)
	}
	gateOn := os.Getenv(kubeletUsesScaleGateEnv) != "off"
	if front := os.Getenv(kubeletUsesScaleFrontEnv); front != "" {
		runKubelets(t, n, gateOn, front)
		return
	}
	_, ctx := ktesting.NewTestContext(t)
	canary := canaryFeature(t)

	dir := t.TempDir()
	tokens := []string{`admin-token,admin,uid-admin,"system:masters"`}
	for i := range n {
		tokens = append(tokens, fmt.Sprintf(`%s,system:node:%s,uid-%d,"system:nodes"`, kubeletToken(i), kubeletNode(i), i))
	}
	tokenFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokenFile, []byte(strings.Join(tokens, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := func(canaryOn bool) []string {
		f := []string{
			"--endpoint-reconciler-type=none",
			fmt.Sprintf("--feature-gates=FeatureLifecycle=%t,%s=%t", gateOn, canary, canaryOn),
			"--authorization-mode=Node,RBAC",
			"--token-auth-file=" + tokenFile,
			"--enable-admission-plugins=NodeRestriction",
			"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		}
		if gateOn {
			f = append(f, "--runtime-config=features.k8s.io/v1alpha1=true")
		}
		return f
	}
	etcd := framework.SharedEtcd()
	start := func(host string, canaryOn bool) *kubeapiservertesting.TestServer {
		genericapiserver.SetHostnameFuncForTests(host)
		s := kubeapiservertesting.StartTestServerOrDie(t, nil, flags(canaryOn), etcd)
		s.TearDownFn = sync.OnceFunc(s.TearDownFn)
		t.Cleanup(s.TearDownFn)
		return s
	}
	first := start("scale-a", true)
	front := newTCPFront(t)
	front.set(first)
	adminOf := func(s *kubeapiservertesting.TestServer) clientset.Interface {
		config := restclient.AnonymousClientConfig(s.ClientConfig)
		config.BearerToken = "admin-token"
		config.QPS, config.Burst = -1, 0
		return clientset.NewForConfigOrDie(config)
	}
	admin := adminOf(first)

	// The Nodes and node leases of the kubelets, as they register; the
	// leases last the run, so that no renewal is in the numbers (a kubelet
	// renews its lease every 10 s, gate on or off).
	kubeletVersion := "v" + version.DefaultKubeBinaryVersion + ".0"
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range n {
		g.Go(func() error {
			name := kubeletNode(i)
			if _, err := admin.CoreV1().Nodes().Create(gctx, &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Status:     corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: kubeletVersion}},
			}, metav1.CreateOptions{}); err != nil {
				return err
			}
			_, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(gctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       ptr.To(name),
					LeaseDurationSeconds: ptr.To[int32](3600),
					RenewTime:            ptr.To(metav1.NewMicroTime(time.Now())),
				},
			}, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	// NodeRestriction reads the Nodes from its informer: a report it cannot
	// check yet is refused and retried after a back-off, which would stretch
	// the start.
	time.Sleep(10 * time.Second)

	// One more watcher, through the front, sees each stored write of a
	// Feature once.
	var stored atomic.Int64
	if gateOn {
		watcher := frontClient(front.addr, "admin-token")
		go func() {
			for ctx.Err() == nil {
				w, err := watcher.FeaturesV1alpha1().Features(metav1.NamespaceSystem).Watch(ctx, metav1.ListOptions{})
				if err == nil {
					for range w.ResultChan() {
						stored.Add(1)
					}
				}
				time.Sleep(time.Second)
			}
		}()
	}
	var kubelets *exec.Cmd
	var rows []string
	live := []*kubeapiservertesting.TestServer{first}
	phase := func(name string, do func()) {
		servers := slices.Clone(live)
		before := map[*kubeapiservertesting.TestServer]map[string]float64{}
		for _, s := range servers {
			before[s] = kubeletScaleMetrics(t, ctx, adminOf(s))
		}
		storedBefore, cpuBefore := stored.Load(), processCPU(t)
		var kubeletCPUBefore time.Duration
		if kubelets != nil {
			kubeletCPUBefore = childCPU(t, kubelets.Process.Pid)
		}
		began := time.Now()
		peak := peakRSS(ctx)
		do()
		rss := peak()
		d := map[string]float64{}
		for _, s := range servers {
			if !slices.Contains(live, s) {
				continue // left during the phase: its counts are gone with it
			}
			after := kubeletScaleMetrics(t, ctx, adminOf(s))
			for k, v := range after {
				d[k] += v - before[s][k]
			}
		}
		cpu := processCPU(t) - cpuBefore
		kubeletCPU := childCPU(t, kubelets.Process.Pid) - kubeletCPUBefore
		runtime.GC()
		var mem runtime.MemStats
		runtime.ReadMemStats(&mem)
		mean := func(sum, count string) string {
			if d[count] == 0 {
				return "-"
			}
			return (time.Duration(d[sum] / d[count] * float64(time.Second))).Round(time.Millisecond).String()
		}
		row := fmt.Sprintf("| %s | %v | %d | %.0f / %.0f / %.0f | %.0f / %.0f | %.0f | %.1f | %.0f | %s | %s | %.0f | %d | %d | %.0f |",
			name, time.Since(began).Round(time.Second), stored.Load()-storedBefore,
			d["uses write 200"], d["uses write 409"], d["uses write other"],
			d["features list"], d["features watch"],
			d["watch events"], d["watch event bytes"]/1e6, d["apf rejected"],
			mean("apf wait system sum", "apf wait system count"),
			mean("uses write seconds sum", "uses write seconds count"),
			cpu.Seconds(), rss>>20, mem.HeapInuse>>20, kubeletCPU.Seconds())
		rows = append(rows, row)
		t.Logf("%d kubelets, gate %s: %s", n, onOff(gateOn), row)
	}

	phase(fmt.Sprintf("%d kubelets start", n), func() {
		kubelets = startKubelets(t, n, gateOn, front.addr)
		waitQuiet(t, &stored)
	})
	phase("idle, 2 min", func() { time.Sleep(2 * time.Minute) })
	var second *kubeapiservertesting.TestServer
	// The servers disagree on the canary: its Feature's conditions say so,
	// and nothing starts.
	phase("a second kube-apiserver joins, the canary off (3 min)", func() {
		second = start("scale-b", false)
		live = append(live, second)
		front.set(first, second)
		time.Sleep(3 * time.Minute)
	})
	phase("the first leaves: the canary's Feature turns off (3 min)", func() {
		front.set(second)
		live = []*kubeapiservertesting.TestServer{second}
		first.TearDownFn()
		time.Sleep(3 * time.Minute)
	})
	if gateOn {
		f, err := adminOf(second).FeaturesV1alpha1().Features(metav1.NamespaceSystem).Get(ctx, strings.ToLower(string(canary)), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: state %s, tasks %v", f.Name, f.Status.State, f.Status.Tasks)
		if f.Status.State != featuresv1alpha1.FeatureStateTurningOff && f.Status.State != featuresv1alpha1.FeatureStateOff {
			t.Errorf("%s did not turn off: state %s", f.Name, f.Status.State)
		}
	}
	t.Logf("%d kubelets, FeatureLifecycle %s:\n%s\n%s", n, onOff(gateOn),
		"| phase | time | stored Feature writes | uses writes (kubelets and kube-apiservers): 200 / 409 / other | Features LIST / WATCH | watch events | watch MB | APF rejected | APF wait, system (mean) | uses write latency (mean) | kube-apiserver CPU-s | peak RSS MiB | heap MiB | kubelets' CPU-s |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
		strings.Join(rows, "\n"))
}

// startKubelets starts this test binary again as the kubelets and waits
// until they all run.
func startKubelets(t *testing.T, n int, gateOn bool, front string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestKubeletUsesAtScale$", "-test.v", "-test.timeout", "0")
	cmd.Env = append(os.Environ(), kubeletUsesScaleFrontEnv+"="+front)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close() // the kubelets stop when their input ends
		_ = cmd.Wait()
	})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "kubelets running") {
				close(ready)
			}
			t.Log("kubelets: " + sc.Text())
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Minute):
		t.Fatal("the kubelets did not start")
	}
	return cmd
}

// runKubelets is the kubelets' process: each watches its Node and, with the
// gate on, reports its uses, until the input ends.
func runKubelets(t *testing.T, n int, gateOn bool, front string) {
	ctx, cancel := context.WithCancel(context.Background())
	canary := canaryFeature(t)
	for i := range n {
		client := frontClient(front, kubeletToken(i))
		factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", kubeletNode(i)).String()
		}))
		factory.Core().V1().Nodes().Informer()
		factory.Start(ctx.Done())
		if gateOn {
			gate := utilfeature.DefaultFeatureGate.DeepCopy()
			if i%50 == 0 {
				if err := gate.Set(string(canary) + "=false"); err != nil {
					t.Fatal(err)
				}
			}
			opts := featureuses.Options("kubelet", kubeletNode(i))
			opts.AllFeatures = true
			reporting.NewGate(gate).Start(ctx, client, opts)
		}
	}
	fmt.Printf("%d kubelets running\n", n)
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	// Exit without TestMain's check for leaked goroutines, which waits for
	// those of the kubelets' 5,000 connections and held the process (and the
	// first process, which waits for it) long after the run.
	os.Exit(0)
}

// frontClient is a client of the servers through the front, with its own
// connection and the kubelet's defaults: protobuf (kubeAPIContentType) and
// its client rate limits (kubeAPIQPS, kubeAPIBurst).
func frontClient(front, token string) clientset.Interface {
	return clientset.NewForConfigOrDie(&restclient.Config{
		Host:        "https://" + front,
		BearerToken: token,
		ContentConfig: restclient.ContentConfig{
			AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json",
			ContentType:        "application/vnd.kubernetes.protobuf",
		},
		// The test servers all serve the fixture certificate, which names 127.0.0.1.
		TLSClientConfig: restclient.TLSClientConfig{CAFile: filepath.Join("..", "..", "..", "cmd", "kube-apiserver", "app", "testing", "testdata",
			"127.0.0.1_10.0.0.1_kubernetes.default.svc-kubernetes.default-kubernetes-localhost.crt")},
		QPS:   50,
		Burst: 100,
		// A dialer of its own: a connection of its own, as each kubelet has.
		Dial: (&net.Dialer{}).DialContext,
	})
}

// tcpFront forwards each connection to one of the servers it is set to, in
// turn, as a load balancer in front of kube-apiservers does.
type tcpFront struct {
	addr string
	mu   sync.Mutex
	to   []string
	next int
}

func newTCPFront(t *testing.T) *tcpFront {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	f := &tcpFront{addr: l.Addr().String()}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go f.forward(conn)
		}
	}()
	return f
}

func (f *tcpFront) set(servers ...*kubeapiservertesting.TestServer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.to = nil
	for _, s := range servers {
		f.to = append(f.to, strings.TrimPrefix(s.ClientConfig.Host, "https://"))
	}
}

func (f *tcpFront) forward(conn net.Conn) {
	defer func() { _ = conn.Close() }()
	f.mu.Lock()
	to := f.to[f.next%len(f.to)]
	f.next++
	f.mu.Unlock()
	backend, err := net.Dial("tcp", to)
	if err != nil {
		return
	}
	defer func() { _ = backend.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(backend, conn); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, backend); done <- struct{}{} }()
	<-done
}

// waitQuiet waits until no Feature was written for 45 s, or 10 minutes.
func waitQuiet(t *testing.T, stored *atomic.Int64) {
	last, lastChange := stored.Load(), time.Now()
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); {
		time.Sleep(5 * time.Second)
		if s := stored.Load(); s != last {
			last, lastChange = s, time.Now()
		} else if time.Since(lastChange) >= 45*time.Second {
			return
		}
	}
	t.Logf("still writing after 10 minutes")
}

// peakRSS samples this process's RSS every second until the returned function
// is called, which returns the largest sample, in bytes.
func peakRSS(ctx context.Context) func() uint64 {
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	sample := func() {
		if rss := currentRSS(); rss > peak.Load() {
			peak.Store(rss)
		}
	}
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-tick.C:
			case <-stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() uint64 {
		close(stop)
		<-done
		sample()
		return peak.Load()
	}
}

func currentRSS() uint64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func kubeletNode(i int) string  { return fmt.Sprintf("kubelet-%05d", i) }
func kubeletToken(i int) string { return fmt.Sprintf("kubelet-token-%05d", i) }

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// canaryFeature is the first beta feature, on by default and not locked, of
// the ones kube-apiserver knows.
func canaryFeature(t *testing.T) featuregate.Feature {
	all := utilfeature.DefaultFeatureGate.DeepCopy().GetAll()
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, string(name))
	}
	slices.Sort(names)
	for _, name := range names {
		if spec := all[featuregate.Feature(name)]; spec.PreRelease == featuregate.Beta && spec.Default && !spec.LockToDefault {
			return featuregate.Feature(name)
		}
	}
	t.Fatal("no beta feature on by default")
	return ""
}

// processCPU is the user and system CPU time of this process so far.
func processCPU(t *testing.T) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		t.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// childCPU is the user and system CPU time of a running child process so far.
func childCPU(t *testing.T, pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name, which ends with the last ')':
	// utime and stime are the 14th and 15th of the line.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	return time.Duration(utime+stime) * time.Second / 100 // clock ticks of USER_HZ 100
}

// kubeletScaleMetrics sums what TestKubeletUsesAtScale reports from the
// server's metrics.
func kubeletScaleMetrics(t *testing.T, ctx context.Context, admin clientset.Interface) map[string]float64 {
	body, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, labels, value := parseSample(sc.Text())
		features := labels["group"] == "features.k8s.io" && labels["resource"] == "features"
		// Reports are applies, moves updates.
		usesWrite := features && labels["subresource"] == "uses" && slices.Contains([]string{"APPLY", "PATCH", "PUT"}, labels["verb"])
		switch {
		case name == "apiserver_request_total" && usesWrite:
			switch labels["code"] {
			case "200", "409":
				m["uses write "+labels["code"]] += value
			default:
				m["uses write other"] += value
			}
		case name == "apiserver_request_total" && features && labels["subresource"] == "" && (labels["verb"] == "LIST" || labels["verb"] == "WATCH"):
			m["features "+strings.ToLower(labels["verb"])] += value
		case name == "apiserver_request_duration_seconds_sum" && usesWrite:
			m["uses write seconds sum"] += value
		case name == "apiserver_request_duration_seconds_count" && usesWrite:
			m["uses write seconds count"] += value
		case name == "apiserver_watch_events_total" && labels["group"] == "features.k8s.io":
			m["watch events"] += value
		case name == "apiserver_watch_events_sizes_sum" && labels["group"] == "features.k8s.io":
			m["watch event bytes"] += value
		case name == "apiserver_flowcontrol_rejected_requests_total":
			m["apf rejected"] += value
		case name == "apiserver_flowcontrol_request_wait_duration_seconds_sum" && labels["priority_level"] == "system":
			m["apf wait system sum"] += value
		case name == "apiserver_flowcontrol_request_wait_duration_seconds_count" && labels["priority_level"] == "system":
			m["apf wait system count"] += value
		}
	}
	return m
}
