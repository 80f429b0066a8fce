package ggml

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Raw C handles. They are never exposed: the exported wrappers own them.
type (
	cContext  = uintptr // struct ggml_context *
	cTensor   = uintptr // struct ggml_tensor *
	cGraph    = uintptr // struct ggml_cgraph *
	cBackend  = uintptr // ggml_backend_t
	cBuffer   = uintptr // ggml_backend_buffer_t
	cBufType  = uintptr // ggml_backend_buffer_type_t
	cDevice   = uintptr // ggml_backend_dev_t
	cReg      = uintptr // ggml_backend_reg_t
	cGallocr  = uintptr // ggml_gallocr_t
	cTypeEnum = int32   // enum ggml_type
)

// initParams is struct ggml_init_params, passed by value to ggml_init:
//
//	struct ggml_init_params { size_t mem_size; void * mem_buffer; bool no_alloc; };
type initParams struct {
	memSize   uintptr
	memBuffer uintptr
	noAlloc   bool
}

type unaryFn = func(ctx cContext, a cTensor) cTensor
type binaryFn = func(ctx cContext, a, b cTensor) cTensor

// api holds every ggml function the project binds, each with its C prototype
// (ggml 0.25.1, headers ggml.h, ggml-backend.h, ggml-alloc.h, ggml-cpu.h).
type api struct {
	// const char * ggml_version(void);
	version func() string
	// const char * ggml_commit(void);
	commit func() string

	// void ggml_backend_load_all_from_path(const char * dir_path);
	backendLoadAllFromPath func(dir string)
	// size_t ggml_backend_reg_count(void);
	backendRegCount func() uintptr
	// ggml_backend_reg_t ggml_backend_reg_get(size_t index);
	backendRegGet func(i uintptr) cReg
	// const char * ggml_backend_reg_name(ggml_backend_reg_t reg);
	backendRegName func(r cReg) string
	// void * ggml_backend_reg_get_proc_address(ggml_backend_reg_t reg, const char * name);
	backendRegGetProcAddress func(r cReg, name string) uintptr
	// size_t ggml_backend_dev_count(void);
	backendDevCount func() uintptr
	// ggml_backend_dev_t ggml_backend_dev_get(size_t index);
	backendDevGet func(i uintptr) cDevice
	// const char * ggml_backend_dev_name(ggml_backend_dev_t device);
	backendDevName func(d cDevice) string
	// const char * ggml_backend_dev_description(ggml_backend_dev_t device);
	backendDevDescription func(d cDevice) string
	// void ggml_backend_dev_memory(ggml_backend_dev_t device, size_t * free, size_t * total);
	backendDevMemory func(d cDevice, free, total *uintptr)
	// enum ggml_backend_dev_type ggml_backend_dev_type(ggml_backend_dev_t device);
	backendDevType func(d cDevice) int32
	// ggml_backend_reg_t ggml_backend_dev_backend_reg(ggml_backend_dev_t device);
	backendDevBackendReg func(d cDevice) cReg
	// ggml_backend_t ggml_backend_dev_init(ggml_backend_dev_t device, const char * params);
	backendDevInit func(d cDevice, params *byte) cBackend
	// bool ggml_backend_dev_supports_op(ggml_backend_dev_t device, const struct ggml_tensor * op);
	backendDevSupportsOp func(d cDevice, op cTensor) bool

	// const char * ggml_backend_name(ggml_backend_t backend);
	backendName func(b cBackend) string
	// void ggml_backend_free(ggml_backend_t backend);
	backendFree func(b cBackend)
	// ggml_backend_buffer_type_t ggml_backend_get_default_buffer_type(ggml_backend_t backend);
	backendGetDefaultBufferType func(b cBackend) cBufType
	// enum ggml_status ggml_backend_graph_compute(ggml_backend_t backend, struct ggml_cgraph * cgraph);
	backendGraphCompute func(b cBackend, g cGraph) int32
	// bool ggml_backend_supports_buft(ggml_backend_t backend, ggml_backend_buffer_type_t buft);
	backendSupportsBuft func(b cBackend, buft cBufType) bool
	// ggml_backend_buffer_type_t ggml_backend_buffer_get_type(ggml_backend_buffer_t buffer);
	backendBufferGetType func(buf cBuffer) cBufType
	// const char * ggml_backend_buft_name(ggml_backend_buffer_type_t buft);
	backendBuftName func(buft cBufType) string
	// void ggml_backend_synchronize(ggml_backend_t backend);
	backendSynchronize func(b cBackend)
	// struct ggml_backend_buffer * ggml_backend_alloc_ctx_tensors(struct ggml_context * ctx, ggml_backend_t backend);
	backendAllocCtxTensors func(ctx cContext, b cBackend) cBuffer
	// void ggml_backend_buffer_free(ggml_backend_buffer_t buffer);
	backendBufferFree func(buf cBuffer)
	// size_t ggml_backend_buffer_get_size(ggml_backend_buffer_t buffer);
	backendBufferGetSize func(buf cBuffer) uintptr
	// void ggml_backend_buffer_clear(ggml_backend_buffer_t buffer, uint8_t value);
	backendBufferClear func(buf cBuffer, value uint8)
	// void ggml_backend_tensor_set(struct ggml_tensor * tensor, const void * data, size_t offset, size_t size);
	backendTensorSet func(t cTensor, data unsafe.Pointer, offset, size uintptr)
	// void ggml_backend_tensor_get(const struct ggml_tensor * tensor, void * data, size_t offset, size_t size);
	backendTensorGet func(t cTensor, data unsafe.Pointer, offset, size uintptr)
	// void ggml_backend_tensor_memset(struct ggml_tensor * tensor, uint8_t value, size_t offset, size_t size);
	backendTensorMemset func(t cTensor, value uint8, offset, size uintptr)
	// void ggml_backend_tensor_copy(struct ggml_tensor * src, struct ggml_tensor * dst);
	backendTensorCopy func(src, dst cTensor)

	// ggml_gallocr_t ggml_gallocr_new(ggml_backend_buffer_type_t buft);
	gallocrNew func(buft cBufType) cGallocr
	// void ggml_gallocr_free(ggml_gallocr_t galloc);
	gallocrFree func(g cGallocr)
	// bool ggml_gallocr_reserve(ggml_gallocr_t galloc, struct ggml_cgraph * graph);
	gallocrReserve func(g cGallocr, graph cGraph) bool
	// bool ggml_gallocr_alloc_graph(ggml_gallocr_t galloc, struct ggml_cgraph * graph);
	gallocrAllocGraph func(g cGallocr, graph cGraph) bool
	// size_t ggml_gallocr_get_buffer_size(ggml_gallocr_t galloc, int buffer_id);
	gallocrGetBufferSize func(g cGallocr, id int32) uintptr

	// struct ggml_context * ggml_init(struct ggml_init_params params);
	init func(p initParams) cContext
	// void ggml_free(struct ggml_context * ctx);
	free func(ctx cContext)
	// size_t ggml_tensor_overhead(void);
	tensorOverhead func() uintptr
	// size_t ggml_graph_overhead_custom(size_t size, bool grads);
	graphOverheadCustom func(size uintptr, grads bool) uintptr
	// int64_t ggml_nelements(const struct ggml_tensor * tensor);
	nelements func(t cTensor) int64
	// size_t ggml_nbytes(const struct ggml_tensor * tensor);
	nbytes func(t cTensor) uintptr
	// size_t ggml_type_size(enum ggml_type type);
	typeSize func(typ cTypeEnum) uintptr
	// bool ggml_is_contiguous(const struct ggml_tensor * tensor);
	isContiguous func(t cTensor) bool
	// const char * ggml_get_name(const struct ggml_tensor * tensor);
	getName func(t cTensor) uintptr
	// struct ggml_tensor * ggml_set_name(struct ggml_tensor * tensor, const char * name);
	setName func(t cTensor, name string) cTensor
	// void ggml_set_input(struct ggml_tensor * tensor);
	setInput func(t cTensor)
	// void ggml_set_output(struct ggml_tensor * tensor);
	setOutput func(t cTensor)
	// size_t ggml_used_mem(const struct ggml_context * ctx);
	usedMem func(ctx cContext) uintptr
	// size_t ggml_get_mem_size(const struct ggml_context * ctx);
	getMemSize func(ctx cContext) uintptr
	// const char * ggml_op_desc(const struct ggml_tensor * t);
	opDesc func(t cTensor) string
	// const char * ggml_type_name(enum ggml_type type);
	typeName func(typ cTypeEnum) string
	// bool ggml_is_transposed(const struct ggml_tensor * tensor);
	isTransposed func(t cTensor) bool
	// struct ggml_tensor * ggml_get_first_tensor(const struct ggml_context * ctx);
	getFirstTensor func(ctx cContext) cTensor
	// struct ggml_tensor * ggml_get_next_tensor(const struct ggml_context * ctx, struct ggml_tensor * tensor);
	getNextTensor func(ctx cContext, t cTensor) cTensor
	// const char * ggml_status_to_string(enum ggml_status status);
	statusToString func(s int32) string

	// struct ggml_tensor * ggml_new_tensor_1d(struct ggml_context * ctx, enum ggml_type type, int64_t ne0);
	newTensor1D func(ctx cContext, typ cTypeEnum, ne0 int64) cTensor
	// struct ggml_tensor * ggml_new_tensor_2d(struct ggml_context * ctx, enum ggml_type type, int64_t ne0, int64_t ne1);
	newTensor2D func(ctx cContext, typ cTypeEnum, ne0, ne1 int64) cTensor
	// struct ggml_tensor * ggml_new_tensor_3d(struct ggml_context * ctx, enum ggml_type type, int64_t ne0, int64_t ne1, int64_t ne2);
	newTensor3D func(ctx cContext, typ cTypeEnum, ne0, ne1, ne2 int64) cTensor
	// struct ggml_tensor * ggml_new_tensor_4d(struct ggml_context * ctx, enum ggml_type type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
	newTensor4D func(ctx cContext, typ cTypeEnum, ne0, ne1, ne2, ne3 int64) cTensor

	// struct ggml_tensor * ggml_view_1d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, size_t offset);
	view1D func(ctx cContext, a cTensor, ne0 int64, offset uintptr) cTensor
	// struct ggml_tensor * ggml_view_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset);
	view2D func(ctx cContext, a cTensor, ne0, ne1 int64, nb1, offset uintptr) cTensor
	// struct ggml_tensor * ggml_view_3d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1, size_t nb2, size_t offset);
	view3D func(ctx cContext, a cTensor, ne0, ne1, ne2 int64, nb1, nb2, offset uintptr) cTensor
	// struct ggml_tensor * ggml_view_4d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, size_t nb1, size_t nb2, size_t nb3, size_t offset);
	view4D func(ctx cContext, a cTensor, ne0, ne1, ne2, ne3 int64, nb1, nb2, nb3, offset uintptr) cTensor
	// struct ggml_tensor * ggml_reshape_1d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0);
	reshape1D func(ctx cContext, a cTensor, ne0 int64) cTensor
	// struct ggml_tensor * ggml_reshape_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1);
	reshape2D func(ctx cContext, a cTensor, ne0, ne1 int64) cTensor
	// struct ggml_tensor * ggml_reshape_3d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2);
	reshape3D func(ctx cContext, a cTensor, ne0, ne1, ne2 int64) cTensor
	// struct ggml_tensor * ggml_reshape_4d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
	reshape4D func(ctx cContext, a cTensor, ne0, ne1, ne2, ne3 int64) cTensor
	// struct ggml_tensor * ggml_permute(struct ggml_context * ctx, struct ggml_tensor * a, int axis0, int axis1, int axis2, int axis3);
	permute func(ctx cContext, a cTensor, ax0, ax1, ax2, ax3 int32) cTensor
	// struct ggml_tensor * ggml_cont(struct ggml_context * ctx, struct ggml_tensor * a);
	cont unaryFn
	// struct ggml_tensor * ggml_transpose(struct ggml_context * ctx, struct ggml_tensor * a);
	transpose unaryFn
	// struct ggml_tensor * ggml_cpy(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
	cpy binaryFn

	// struct ggml_tensor * ggml_add(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
	add binaryFn
	// struct ggml_tensor * ggml_sub(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
	sub binaryFn
	// struct ggml_tensor * ggml_mul(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
	mul binaryFn
	// struct ggml_tensor * ggml_div(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
	div binaryFn
	// struct ggml_tensor * ggml_mul_mat(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
	mulMat binaryFn
	// void ggml_mul_mat_set_prec(struct ggml_tensor * a, enum ggml_prec prec);
	mulMatSetPrec func(t cTensor, prec int32)
	// struct ggml_tensor * ggml_repeat(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
	repeat binaryFn
	// struct ggml_tensor * ggml_get_rows(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
	getRows binaryFn
	// struct ggml_tensor * ggml_concat(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, int dim);
	concat func(ctx cContext, a, b cTensor, dim int32) cTensor

	// struct ggml_tensor * ggml_relu(struct ggml_context * ctx, struct ggml_tensor * a);
	relu unaryFn
	// struct ggml_tensor * ggml_sigmoid(struct ggml_context * ctx, struct ggml_tensor * a);
	sigmoid unaryFn
	// struct ggml_tensor * ggml_tanh(struct ggml_context * ctx, struct ggml_tensor * a);
	tanh unaryFn
	// struct ggml_tensor * ggml_sqrt(struct ggml_context * ctx, struct ggml_tensor * a);
	sqrt unaryFn
	// struct ggml_tensor * ggml_sqr(struct ggml_context * ctx, struct ggml_tensor * a);
	sqr unaryFn
	// struct ggml_tensor * ggml_abs(struct ggml_context * ctx, struct ggml_tensor * a);
	abs unaryFn
	// struct ggml_tensor * ggml_exp(struct ggml_context * ctx, struct ggml_tensor * a);
	exp unaryFn
	// struct ggml_tensor * ggml_log(struct ggml_context * ctx, struct ggml_tensor * a);
	log unaryFn
	// struct ggml_tensor * ggml_neg(struct ggml_context * ctx, struct ggml_tensor * a);
	neg unaryFn
	// struct ggml_tensor * ggml_sum_rows(struct ggml_context * ctx, struct ggml_tensor * a);
	sumRows unaryFn
	// struct ggml_tensor * ggml_scale(struct ggml_context * ctx, struct ggml_tensor * a, float s);
	scale func(ctx cContext, a cTensor, s float32) cTensor
	// struct ggml_tensor * ggml_scale_bias(struct ggml_context * ctx, struct ggml_tensor * a, float s, float b);
	scaleBias func(ctx cContext, a cTensor, s, b float32) cTensor
	// struct ggml_tensor * ggml_clamp(struct ggml_context * ctx, struct ggml_tensor * a, float min, float max);
	clamp func(ctx cContext, a cTensor, lo, hi float32) cTensor

	// struct ggml_tensor * ggml_conv_1d(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, int s0, int p0, int d0);
	conv1D func(ctx cContext, a, b cTensor, s0, p0, d0 int32) cTensor
	// struct ggml_tensor * ggml_im2col(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, int s0, int s1, int p0, int p1, int d0, int d1, bool is_2D, enum ggml_type dst_type);
	im2col func(ctx cContext, a, b cTensor, s0, s1, p0, p1, d0, d1 int32, is2D bool, dst cTypeEnum) cTensor
	// struct ggml_tensor * ggml_pad(struct ggml_context * ctx, struct ggml_tensor * a, int p0, int p1, int p2, int p3);
	pad func(ctx cContext, a cTensor, p0, p1, p2, p3 int32) cTensor
	// struct ggml_tensor * ggml_pad_ext(struct ggml_context * ctx, struct ggml_tensor * a, int lp0, int rp0, int lp1, int rp1, int lp2, int rp2, int lp3, int rp3);
	padExt func(ctx cContext, a cTensor, lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3 int32) cTensor
	// struct ggml_tensor * ggml_pad_reflect_1d(struct ggml_context * ctx, struct ggml_tensor * a, int p0, int p1);
	padReflect1D func(ctx cContext, a cTensor, p0, p1 int32) cTensor

	// struct ggml_cgraph * ggml_new_graph_custom(struct ggml_context * ctx, size_t size, bool grads);
	newGraphCustom func(ctx cContext, size uintptr, grads bool) cGraph
	// void ggml_build_forward_expand(struct ggml_cgraph * cgraph, struct ggml_tensor * tensor);
	buildForwardExpand func(g cGraph, t cTensor)
	// int ggml_graph_n_nodes(struct ggml_cgraph * cgraph);
	graphNNodes func(g cGraph) int32
	// struct ggml_tensor * ggml_graph_node(struct ggml_cgraph * cgraph, int i);
	graphNode func(g cGraph, i int32) cTensor
}

// bind resolves every field of api in the opened libraries. A missing symbol is
// an error naming it (purego would panic).
func (a *api) bind(handles ...uintptr) error {
	type entry struct {
		fptr any
		name string
	}
	entries := []entry{
		{&a.version, "ggml_version"},
		{&a.commit, "ggml_commit"},
		{&a.backendLoadAllFromPath, "ggml_backend_load_all_from_path"},
		{&a.backendRegCount, "ggml_backend_reg_count"},
		{&a.backendRegGet, "ggml_backend_reg_get"},
		{&a.backendRegName, "ggml_backend_reg_name"},
		{&a.backendRegGetProcAddress, "ggml_backend_reg_get_proc_address"},
		{&a.backendDevCount, "ggml_backend_dev_count"},
		{&a.backendDevGet, "ggml_backend_dev_get"},
		{&a.backendDevName, "ggml_backend_dev_name"},
		{&a.backendDevDescription, "ggml_backend_dev_description"},
		{&a.backendDevMemory, "ggml_backend_dev_memory"},
		{&a.backendDevType, "ggml_backend_dev_type"},
		{&a.backendDevBackendReg, "ggml_backend_dev_backend_reg"},
		{&a.backendDevInit, "ggml_backend_dev_init"},
		{&a.backendDevSupportsOp, "ggml_backend_dev_supports_op"},
		{&a.backendName, "ggml_backend_name"},
		{&a.backendFree, "ggml_backend_free"},
		{&a.backendGetDefaultBufferType, "ggml_backend_get_default_buffer_type"},
		{&a.backendGraphCompute, "ggml_backend_graph_compute"},
		{&a.backendSynchronize, "ggml_backend_synchronize"},
		{&a.backendSupportsBuft, "ggml_backend_supports_buft"},
		{&a.backendBufferGetType, "ggml_backend_buffer_get_type"},
		{&a.backendBuftName, "ggml_backend_buft_name"},
		{&a.backendAllocCtxTensors, "ggml_backend_alloc_ctx_tensors"},
		{&a.backendBufferFree, "ggml_backend_buffer_free"},
		{&a.backendBufferGetSize, "ggml_backend_buffer_get_size"},
		{&a.backendBufferClear, "ggml_backend_buffer_clear"},
		{&a.backendTensorSet, "ggml_backend_tensor_set"},
		{&a.backendTensorGet, "ggml_backend_tensor_get"},
		{&a.backendTensorMemset, "ggml_backend_tensor_memset"},
		{&a.backendTensorCopy, "ggml_backend_tensor_copy"},
		{&a.gallocrNew, "ggml_gallocr_new"},
		{&a.gallocrFree, "ggml_gallocr_free"},
		{&a.gallocrReserve, "ggml_gallocr_reserve"},
		{&a.gallocrAllocGraph, "ggml_gallocr_alloc_graph"},
		{&a.gallocrGetBufferSize, "ggml_gallocr_get_buffer_size"},
		{&a.init, "ggml_init"},
		{&a.free, "ggml_free"},
		{&a.tensorOverhead, "ggml_tensor_overhead"},
		{&a.graphOverheadCustom, "ggml_graph_overhead_custom"},
		{&a.nelements, "ggml_nelements"},
		{&a.nbytes, "ggml_nbytes"},
		{&a.typeSize, "ggml_type_size"},
		{&a.isContiguous, "ggml_is_contiguous"},
		{&a.getName, "ggml_get_name"},
		{&a.setName, "ggml_set_name"},
		{&a.setInput, "ggml_set_input"},
		{&a.setOutput, "ggml_set_output"},
		{&a.statusToString, "ggml_status_to_string"},
		{&a.usedMem, "ggml_used_mem"},
		{&a.getMemSize, "ggml_get_mem_size"},
		{&a.opDesc, "ggml_op_desc"},
		{&a.typeName, "ggml_type_name"},
		{&a.isTransposed, "ggml_is_transposed"},
		{&a.getFirstTensor, "ggml_get_first_tensor"},
		{&a.getNextTensor, "ggml_get_next_tensor"},
		{&a.newTensor1D, "ggml_new_tensor_1d"},
		{&a.newTensor2D, "ggml_new_tensor_2d"},
		{&a.newTensor3D, "ggml_new_tensor_3d"},
		{&a.newTensor4D, "ggml_new_tensor_4d"},
		{&a.view1D, "ggml_view_1d"},
		{&a.view2D, "ggml_view_2d"},
		{&a.view3D, "ggml_view_3d"},
		{&a.view4D, "ggml_view_4d"},
		{&a.reshape1D, "ggml_reshape_1d"},
		{&a.reshape2D, "ggml_reshape_2d"},
		{&a.reshape3D, "ggml_reshape_3d"},
		{&a.reshape4D, "ggml_reshape_4d"},
		{&a.permute, "ggml_permute"},
		{&a.cont, "ggml_cont"},
		{&a.transpose, "ggml_transpose"},
		{&a.cpy, "ggml_cpy"},
		{&a.add, "ggml_add"},
		{&a.sub, "ggml_sub"},
		{&a.mul, "ggml_mul"},
		{&a.div, "ggml_div"},
		{&a.mulMat, "ggml_mul_mat"},
		{&a.repeat, "ggml_repeat"},
		{&a.mulMatSetPrec, "ggml_mul_mat_set_prec"},
		{&a.getRows, "ggml_get_rows"},
		{&a.concat, "ggml_concat"},
		{&a.relu, "ggml_relu"},
		{&a.sigmoid, "ggml_sigmoid"},
		{&a.tanh, "ggml_tanh"},
		{&a.sqrt, "ggml_sqrt"},
		{&a.sqr, "ggml_sqr"},
		{&a.abs, "ggml_abs"},
		{&a.exp, "ggml_exp"},
		{&a.log, "ggml_log"},
		{&a.neg, "ggml_neg"},
		{&a.sumRows, "ggml_sum_rows"},
		{&a.scale, "ggml_scale"},
		{&a.scaleBias, "ggml_scale_bias"},
		{&a.clamp, "ggml_clamp"},
		{&a.conv1D, "ggml_conv_1d"},
		{&a.im2col, "ggml_im2col"},
		{&a.pad, "ggml_pad"},
		{&a.padExt, "ggml_pad_ext"},
		{&a.padReflect1D, "ggml_pad_reflect_1d"},
		{&a.newGraphCustom, "ggml_new_graph_custom"},
		{&a.buildForwardExpand, "ggml_build_forward_expand"},
		{&a.graphNNodes, "ggml_graph_n_nodes"},
		{&a.graphNode, "ggml_graph_node"},
	}
	for _, e := range entries {
		addr, err := lookup(e.name, handles...)
		if err != nil {
			return err
		}
		purego.RegisterFunc(e.fptr, addr)
	}
	return nil
}

// lookup finds a symbol in the first of handles that exports it.
func lookup(name string, handles ...uintptr) (uintptr, error) {
	var last error
	for _, h := range handles {
		addr, err := purego.Dlsym(h, name)
		if err == nil && addr != 0 {
			return addr, nil
		}
		last = err
	}
	return 0, fmt.Errorf("ggml: symbol %s not found in the ggml libraries (%v); the libraries are not the ggml %s build this binding was written for: run `make deps`", name, last, WantVersion)
}
