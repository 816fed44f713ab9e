// Command fake-gpu is a kubelet device plugin that advertises N fake GPUs as `nvidia.com/gpu`
// on a kind worker, so the scheduler, the kubelet's admission and preemption treat the worker
// exactly as a GPU node (the in-cluster GPUs of the overflow scenarios). It speaks the device
// plugin API v1beta1 as the kubelet documents it ("Device Plugins" in the Kubernetes docs): it
// serves DevicePlugin on a unix socket in /var/lib/kubelet/device-plugins/, registers that
// socket with the kubelet's Registration service on kubelet.sock, streams its devices from
// ListAndWatch, and registers again whenever the kubelet restarts (the kubelet then deletes the
// plugin sockets, which is how a plugin notices).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	node    string
	devices []*pluginapi.Device
	stop    chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list once; the devices never change, so the stream then stays
// open until the plugin stops (a closed stream would make the kubelet drop the devices).
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	select {
	case <-p.stop:
	case <-s.Context().Done():
	}
	return nil
}

// Allocate hands the container the device ids the way the NVIDIA plugin does, in
// NVIDIA_VISIBLE_DEVICES, so a workload can see which fake GPUs it got.
func (p *plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{
				"NVIDIA_VISIBLE_DEVICES": strings.Join(c.DevicesIds, ","),
				"GPU_VK_FAKE_GPU_NODE":   p.node,
			},
		})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve starts the plugin's gRPC server on socket and registers it with the kubelet.
func serve(p *plugin, dir, socket, resource string) (*grpc.Server, error) {
	path := filepath.Join(dir, socket)
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(l) }()

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("kubelet socket: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     socket,
		ResourceName: resource,
	})
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("register with the kubelet: %w", err)
	}
	return srv, nil
}

func main() {
	count := flag.Int("devices", 2, "fake GPUs on this node")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name")
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device plugin folder")
	flag.Parse()
	node := os.Getenv("NODE_NAME")
	const socket = "gpu-vk-fake-gpu.sock"

	devices := make([]*pluginapi.Device, 0, *count)
	for i := 0; i < *count; i++ {
		devices = append(devices, &pluginapi.Device{ID: fmt.Sprintf("fake-gpu-%d", i), Health: pluginapi.Healthy})
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	for {
		p := &plugin{node: node, devices: devices, stop: make(chan struct{})}
		srv, err := serve(p, *dir, socket, *resource)
		if err != nil {
			log.Printf("%v; retrying in 2s", err)
			select {
			case <-signals:
				return
			case <-time.After(2 * time.Second):
			}
			continue
		}
		log.Printf("registered %d x %s on node %q", *count, *resource, node)
		// The kubelet deletes plugin sockets when it restarts: register again then.
		restarted := false
		for !restarted {
			select {
			case <-signals:
				close(p.stop)
				srv.Stop()
				return
			case <-time.After(2 * time.Second):
				if _, err := os.Stat(filepath.Join(*dir, socket)); err != nil {
					log.Printf("plugin socket gone (kubelet restarted?); registering again")
					restarted = true
				}
			}
		}
		close(p.stop)
		srv.Stop()
	}
}
