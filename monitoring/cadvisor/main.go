// Command cadvisor is a local stand-in for gcr.io/cadvisor/cadvisor:v0.49.1,
// built from the github.com/google/cadvisor v0.49.1 library module (the
// official cmd module is not on the Go proxy). It runs the library's manager
// with the raw and Docker container handlers and serves the REST endpoints the
// lab reads, with the same paths and JSON shapes as the official binary:
//
//	GET /api/v1.3/docker/             all Docker containers, keyed by "/docker/<id>"
//	GET /api/v1.3/docker/<id-or-name> one Docker container (same map shape)
//	GET /api/v1.3/containers/<path>   any cgroup ("/" is the machine)
//	GET /api/v1.3/machine             machine info
//	GET /api/v2.0/stats/<name>?type=docker&count=N
//	GET /healthz                      "ok"
//
// Flags are the library's own (--housekeeping_interval, default 1s,
// --allow_dynamic_housekeeping, --docker_only, --docker, ...) plus the
// official binary's --port, --listen_ip and --storage_duration, so the
// compose file can pass the same command line to either image.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/cadvisor/cache/memory"
	"github.com/google/cadvisor/container"
	info "github.com/google/cadvisor/info/v1"
	v2 "github.com/google/cadvisor/info/v2"
	"github.com/google/cadvisor/manager"
	"github.com/google/cadvisor/utils/sysfs"
	"k8s.io/klog/v2"

	// Registers the Docker container handler; the raw (cgroup) handler is
	// always registered by manager.Start.
	_ "github.com/google/cadvisor/container/docker/install"
)

var (
	listenIP        = flag.String("listen_ip", "", "IP to listen on, defaults to all IPs")
	listenPort      = flag.Int("port", 8080, "port to listen")
	storageDuration = flag.Duration("storage_duration", 2*time.Minute, "How long to keep data stored")
	// Split on "," like the official binary: the raw handler expects at least
	// one element (an empty string meaning "no prefixes").
	rawCgroupPrefixWhitelist = flag.String("raw_cgroup_prefix_whitelist", "", "A comma-separated list of cgroup path prefix that needs to be collected even when -docker_only is specified")
	envMetadataWhitelist     = flag.String("env_metadata_whitelist", "", "a comma-separated list of environment variable keys matched with specified prefix that needs to be collected for containers")
)

// The official binary's default set minus the metrics it disables by default,
// so the JSON carries the same sections (cpu, memory, network, diskio, ...).
var ignoredMetrics = container.MetricSet{
	container.MemoryNumaMetrics:              struct{}{},
	container.NetworkTcpUsageMetrics:         struct{}{},
	container.NetworkUdpUsageMetrics:         struct{}{},
	container.NetworkAdvancedTcpUsageMetrics: struct{}{},
	container.ProcessSchedulerMetrics:        struct{}{},
	container.ProcessMetrics:                 struct{}{},
	container.HugetlbUsageMetrics:            struct{}{},
	container.ReferencedMemoryMetrics:        struct{}{},
	container.CPUTopologyMetrics:             struct{}{},
	container.ResctrlMetrics:                 struct{}{},
	container.CPUSetMetrics:                  struct{}{},
}

// Used instead of the defaults above when set, as in the official binary.
var enabledMetrics = container.MetricSet{}

func init() {
	options := container.AllMetrics.String()
	flag.Var(&ignoredMetrics, "disable_metrics", "comma-separated list of metrics to be disabled. Options are "+options)
	flag.Var(&enabledMetrics, "enable_metrics", "comma-separated list of metrics to be enabled. If set, overrides 'disable_metrics'. Options are "+options)
}

func main() {
	klog.InitFlags(nil)
	defer klog.Flush()
	flag.Parse()

	includedMetrics := container.AllMetrics.Difference(ignoredMetrics)
	if len(enabledMetrics) > 0 {
		includedMetrics = enabledMetrics
	}
	resourceManager, err := manager.New(
		memory.New(*storageDuration, nil),
		sysfs.NewRealSysFs(),
		manager.HousekeepingConfigFlags,
		includedMetrics,
		http.DefaultClient,
		strings.Split(*rawCgroupPrefixWhitelist, ","),
		strings.Split(*envMetadataWhitelist, ","),
		"", // perf events config
		0,  // resctrl interval
	)
	if err != nil {
		klog.Fatalf("Failed to create a manager: %v", err)
	}
	if err := resourceManager.Start(); err != nil {
		klog.Fatalf("Failed to start manager: %v", err)
	}
	stopOnSignal(resourceManager)

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok")
	})
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if err := serveAPI(resourceManager, w, r); err != nil {
			// The official API answers every failure with a 500 and the text.
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})

	addr := fmt.Sprintf("%s:%d", *listenIP, *listenPort)
	klog.Infof("Starting local cAdvisor (library v0.49.1) on %s", addr)
	klog.Fatal(http.ListenAndServe(addr, mux))
}

func stopOnSignal(m manager.Manager) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		if err := m.Stop(); err != nil {
			klog.Errorf("Failed to stop container manager: %v", err)
		}
		klog.Infof("Exiting given signal: %v", sig)
		os.Exit(0)
	}()
}

// Same split as the official API: /api/<version>/<request type>[/<args...>].
var apiPath = regexp.MustCompile(`^/api/([^/]+)/?([^/]+)?(.*)$`)

func serveAPI(m manager.Manager, w http.ResponseWriter, r *http.Request) error {
	parts := apiPath.FindStringSubmatch(r.URL.Path)
	if parts == nil {
		return fmt.Errorf("malformed request %q", r.URL.Path)
	}
	version, requestType := parts[1], parts[2]
	args := strings.Split(parts[3], "/")
	if len(args) > 0 && args[0] == "" {
		args = args[1:]
	}

	switch version {
	case "v1.0", "v1.1", "v1.2", "v1.3":
		return serveV1(m, requestType, args, w, r)
	case "v2.0":
		return serveV2(m, requestType, args, w, r)
	default:
		return fmt.Errorf("unsupported API version %q", version)
	}
}

func serveV1(m manager.Manager, requestType string, args []string, w http.ResponseWriter, r *http.Request) error {
	switch requestType {
	case "machine":
		machineInfo, err := m.GetMachineInfo()
		if err != nil {
			return err
		}
		return writeJSON(w, machineInfo)
	case "containers":
		query, err := containerInfoRequest(r.Body)
		if err != nil {
			return err
		}
		name := containerName(args)
		cont, err := m.GetContainerInfo(name, query)
		if err != nil {
			return fmt.Errorf("failed to get container %q with error: %s", name, err)
		}
		return writeJSON(w, cont)
	case "docker":
		query, err := containerInfoRequest(r.Body)
		if err != nil {
			return err
		}
		// "docker/" means all containers, like "docker".
		if len(args) == 1 && args[0] == "" {
			args = args[:0]
		}
		switch len(args) {
		case 0:
			containers, err := m.AllDockerContainers(query)
			if err != nil {
				return fmt.Errorf("failed to get all Docker containers with error: %v", err)
			}
			return writeJSON(w, containers)
		case 1:
			cont, err := m.DockerContainer(args[0], query)
			if err != nil {
				return fmt.Errorf("failed to get Docker container %q with error: %v", args[0], err)
			}
			return writeJSON(w, map[string]info.ContainerInfo{cont.Name: cont})
		default:
			return fmt.Errorf("unknown request for Docker container %v", args)
		}
	default:
		return fmt.Errorf("unknown request type %q", requestType)
	}
}

func serveV2(m manager.Manager, requestType string, args []string, w http.ResponseWriter, r *http.Request) error {
	opt, err := requestOptions(r)
	if err != nil {
		return err
	}
	switch requestType {
	case "stats":
		name := containerName(args)
		infos, err := m.GetRequestedContainersInfo(name, opt)
		if err != nil {
			if len(infos) == 0 {
				return err
			}
			klog.Errorf("Error calling GetRequestedContainersInfo: %v", err)
		}
		stats := make(map[string][]v2.DeprecatedContainerStats, len(infos))
		for name, cinfo := range infos {
			stats[name] = v2.DeprecatedStatsFromV1(cinfo)
		}
		return writeJSON(w, stats)
	case "spec":
		specs, err := m.GetContainerSpec(containerName(args), opt)
		if err != nil {
			return err
		}
		return writeJSON(w, specs)
	case "machine":
		machineInfo, err := m.GetMachineInfo()
		if err != nil {
			return err
		}
		return writeJSON(w, machineInfo)
	default:
		return fmt.Errorf("unknown request type %q", requestType)
	}
}

// The v1 API takes its query (num_stats, start, end) as an optional JSON body.
func containerInfoRequest(body io.Reader) (*info.ContainerInfoRequest, error) {
	query := info.DefaultContainerInfoRequest()
	if err := json.NewDecoder(body).Decode(&query); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("unable to decode the json value: %s", err)
	}
	return &query, nil
}

// The v2 API takes type (name|docker), count, recursive and max_age as URL parameters.
func requestOptions(r *http.Request) (v2.RequestOptions, error) {
	opt := v2.RequestOptions{IdType: v2.TypeName, Count: 64}
	params := r.URL.Query()
	if idType := params.Get("type"); idType != "" {
		if idType != v2.TypeName && idType != v2.TypeDocker {
			return opt, fmt.Errorf("unknown 'type' %q", idType)
		}
		opt.IdType = idType
	}
	if count := params.Get("count"); count != "" {
		n, err := strconv.Atoi(count)
		if err != nil {
			return opt, fmt.Errorf("failed to parse 'count' option: %v", count)
		}
		if n < -1 {
			return opt, fmt.Errorf("invalid 'count' option: only -1 and larger values allowed, not %d", n)
		}
		opt.Count = n
	}
	opt.Recursive = params.Get("recursive") == "true"
	if maxAge := params.Get("max_age"); maxAge != "" {
		d, err := time.ParseDuration(maxAge)
		if err != nil {
			return opt, fmt.Errorf("failed to parse 'max_age' option: %v", err)
		}
		opt.MaxAge = &d
	}
	return opt, nil
}

func containerName(args []string) string {
	return path.Join("/", strings.Join(args, "/"))
}

func writeJSON(w http.ResponseWriter, result interface{}) error {
	out, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("failed to marshal response: %s", err)
	}
	w.Header().Set("Content-Type", "application/json")
	_, err = w.Write(out)
	return err
}
