package ggml

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// DefaultDir is the ggml folder to use when no --ggml-dir is given: the
// AUDIOPROOF_GGML_DIR environment variable if set, else .deps/ggml/vulkan if it
// exists (it holds the CPU backend too), else .deps/ggml/cpu, looked up from
// the current directory upward and then from the executable's directory
// upward. When nothing is found it returns .deps/ggml/cpu relative to the
// current directory, so Open's error names the missing folder.
func DefaultDir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		starts = append(starts, filepath.Dir(exe))
	}
	for _, start := range starts {
		if d := findUp(start); d != "" {
			return d
		}
	}
	return filepath.Join(".deps", "ggml", "cpu")
}

func findUp(start string) string {
	for dir := start; ; {
		for _, sub := range []string{"vulkan", "cpu"} {
			cand := filepath.Join(dir, ".deps", "ggml", sub)
			if _, err := os.Stat(filepath.Join(cand, "libggml-base.so")); err == nil {
				return cand
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Environment variables that make ggml-vulkan use lavapipe (a CPU Vulkan driver).
const (
	EnvVkVisibleDevices = "GGML_VK_VISIBLE_DEVICES"
	EnvVkICDFilenames   = "VK_ICD_FILENAMES"
	EnvVkDisableF16     = "GGML_VK_DISABLE_F16"
	LavapipeICD         = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"
)

// VulkanDevice is a physical device the Vulkan loader reports.
type VulkanDevice struct {
	Name string
	// Type is other, igpu, gpu, virtual-gpu or cpu (VkPhysicalDeviceType).
	Type string
}

// IsGPU reports whether ggml-vulkan uses the device without being told to.
func (d VulkanDevice) IsGPU() bool {
	return d.Type == "igpu" || d.Type == "gpu" || d.Type == "virtual-gpu"
}

var vkTypeNames = []string{"other", "igpu", "gpu", "virtual-gpu", "cpu"}

// ProbeVulkan lists the Vulkan physical devices through libvulkan.so.1 (without
// ggml). It fails when libvulkan is not installed.
func ProbeVulkan() ([]VulkanDevice, error) {
	lib, err := purego.Dlopen("libvulkan.so.1", purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("ggml: Vulkan loader libvulkan.so.1 not found (%v); install it: apt-get install -y libvulkan1 mesa-vulkan-drivers", err)
	}
	defer purego.Dlclose(lib)
	var (
		// VkResult vkCreateInstance(const VkInstanceCreateInfo*, const VkAllocationCallbacks*, VkInstance*);
		createInstance func(info unsafe.Pointer, alloc uintptr, inst *uintptr) int32
		// void vkDestroyInstance(VkInstance, const VkAllocationCallbacks*);
		destroyInstance func(inst uintptr, alloc uintptr)
		// VkResult vkEnumeratePhysicalDevices(VkInstance, uint32_t*, VkPhysicalDevice*);
		enumerate func(inst uintptr, n *uint32, devs *uintptr) int32
		// void vkGetPhysicalDeviceProperties(VkPhysicalDevice, VkPhysicalDeviceProperties*);
		props func(dev uintptr, p unsafe.Pointer)
	)
	for _, s := range []struct {
		fn   any
		name string
	}{{&createInstance, "vkCreateInstance"}, {&destroyInstance, "vkDestroyInstance"},
		{&enumerate, "vkEnumeratePhysicalDevices"}, {&props, "vkGetPhysicalDeviceProperties"}} {
		addr, err := purego.Dlsym(lib, s.name)
		if err != nil {
			return nil, fmt.Errorf("ggml: libvulkan.so.1 lacks %s: %v", s.name, err)
		}
		purego.RegisterFunc(s.fn, addr)
	}
	// VkInstanceCreateInfo: sType (VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO = 1),
	// pNext, flags, pApplicationInfo, 2 x (count, names): 64 bytes, zero but sType.
	info := make([]uint64, 8)
	info[0] = 1
	var inst uintptr
	if r := createInstance(unsafe.Pointer(&info[0]), 0, &inst); r != 0 {
		return nil, fmt.Errorf("ggml: vkCreateInstance failed (VkResult %d): no usable Vulkan driver; install mesa-vulkan-drivers", r)
	}
	defer destroyInstance(inst, 0)
	var n uint32
	if r := enumerate(inst, &n, nil); r != 0 && r != 5 {
		return nil, fmt.Errorf("ggml: vkEnumeratePhysicalDevices failed (VkResult %d)", r)
	}
	if n == 0 {
		return nil, nil
	}
	devs := make([]uintptr, n)
	if r := enumerate(inst, &n, &devs[0]); r != 0 && r != 5 {
		return nil, fmt.Errorf("ggml: vkEnumeratePhysicalDevices failed (VkResult %d)", r)
	}
	out := make([]VulkanDevice, 0, n)
	// VkPhysicalDeviceProperties is 824 bytes: deviceType (uint32) at 16,
	// deviceName[256] at 20. Over-allocate.
	buf := make([]byte, 4096)
	for _, d := range devs[:n] {
		clear(buf)
		props(d, unsafe.Pointer(&buf[0]))
		typ := *(*uint32)(unsafe.Pointer(&buf[16]))
		name := buf[20 : 20+256]
		end := 0
		for end < len(name) && name[end] != 0 {
			end++
		}
		tn := "unknown"
		if int(typ) < len(vkTypeNames) {
			tn = vkTypeNames[typ]
		}
		out = append(out, VulkanDevice{Name: string(name[:end]), Type: tn})
	}
	return out, nil
}

var prepareMu sync.Mutex

// PrepareVulkanEnv makes ggml-vulkan usable and accurate. Call it before Open
// when the user asks for --backend vulkan (or lists devices).
//
// Accuracy: unless the user set GGML_VK_DISABLE_F16, it sets it to 1, because
// ggml-vulkan otherwise runs f32 matrix products through f16 (max error 6e-3
// on a 256-deep product, measured on lavapipe; ggml_mul_mat_set_prec does not
// change that), beyond the 1e-3 the VAD parity allows. It logs that it did.
//
// No GPU: if the user already set GGML_VK_VISIBLE_DEVICES or
// VK_ICD_FILENAMES, or a GPU Vulkan device is visible, it changes nothing.
// Otherwise, when lavapipe is installed, it sets GGML_VK_VISIBLE_DEVICES=0 and
// VK_ICD_FILENAMES to lavapipe's ICD (in the C environment too, which ggml
// reads) and logs that it did. It returns whether it selected lavapipe.
func PrepareVulkanEnv(logf func(format string, args ...any)) (bool, error) {
	prepareMu.Lock()
	defer prepareMu.Unlock()
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if _, set := os.LookupEnv(EnvVkDisableF16); !set {
		if err := os.Setenv(EnvVkDisableF16, "1"); err != nil {
			return false, err
		}
		logf("Vulkan: set %s=1 so f32 matrix products stay in f32 (accuracy over speed)", EnvVkDisableF16)
	}
	if os.Getenv(EnvVkVisibleDevices) != "" || os.Getenv(EnvVkICDFilenames) != "" {
		return false, nil
	}
	devs, err := ProbeVulkan()
	if err != nil {
		return false, err
	}
	for _, d := range devs {
		if d.IsGPU() {
			return false, nil
		}
	}
	if _, err := os.Stat(LavapipeICD); err != nil {
		return false, fmt.Errorf("ggml: no GPU Vulkan device and no lavapipe driver (%s); install it: apt-get install -y mesa-vulkan-drivers", LavapipeICD)
	}
	// With CGO_ENABLED=0, purego's runtime shim forwards os.Setenv to libc
	// setenv, so ggml's getenv sees these (checked by TestSetenvReachesC).
	if err := os.Setenv(EnvVkVisibleDevices, "0"); err != nil {
		return false, err
	}
	if err := os.Setenv(EnvVkICDFilenames, LavapipeICD); err != nil {
		return false, err
	}
	logf("no GPU Vulkan device visible; using the lavapipe CPU Vulkan driver: set %s=0 and %s=%s", EnvVkVisibleDevices, EnvVkICDFilenames, LavapipeICD)
	return true, nil
}
