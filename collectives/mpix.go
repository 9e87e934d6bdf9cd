package collectives

// What gompi lacks, on MPI_COMM_WORLD: Allgatherv and Gatherv of int32, nonblocking
// byte messages and their completion, and probing for any message.

/*
#cgo pkg-config: ompi
#include <mpi.h>

static int brandrt_allgatherv(void *sb, int n, void *rb, int *counts, int *displs) {
	return MPI_Allgatherv(sb, n, MPI_INT32_T, rb, counts, displs, MPI_INT32_T, MPI_COMM_WORLD);
}

static int brandrt_gatherv(void *sb, int n, void *rb, int *counts, int *displs, int root) {
	return MPI_Gatherv(sb, n, MPI_INT32_T, rb, counts, displs, MPI_INT32_T, root, MPI_COMM_WORLD);
}

static int brandrt_isend(void *b, int n, int dst, int tag, MPI_Request *r) {
	return MPI_Isend(b, n, MPI_BYTE, dst, tag, MPI_COMM_WORLD, r);
}

static int brandrt_issend(void *b, int n, int dst, int tag, MPI_Request *r) {
	return MPI_Issend(b, n, MPI_BYTE, dst, tag, MPI_COMM_WORLD, r);
}

static int brandrt_irecv(void *b, int n, int src, int tag, MPI_Request *r) {
	if (src < 0) src = MPI_ANY_SOURCE;
	if (tag < 0) tag = MPI_ANY_TAG;
	return MPI_Irecv(b, n, MPI_BYTE, src, tag, MPI_COMM_WORLD, r);
}

static int brandrt_status(MPI_Status *st, int *src, int *tag, int *n) {
	*src = st->MPI_SOURCE;
	*tag = st->MPI_TAG;
	return MPI_Get_count(st, MPI_BYTE, n);
}

static int brandrt_iprobe(int *flag, int *src, int *tag, int *n) {
	MPI_Status st;
	int rc = MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, flag, &st);
	if (rc != MPI_SUCCESS || !*flag) return rc;
	return brandrt_status(&st, src, tag, n);
}

static int brandrt_recv(void *b, int n, int src, int tag, int *got) {
	MPI_Status st;
	int s, t;
	int rc = MPI_Recv(b, n, MPI_BYTE, src, tag, MPI_COMM_WORLD, &st);
	if (rc != MPI_SUCCESS) return rc;
	return brandrt_status(&st, &s, &t, got);
}

// brandrt_test fills src, tag and n only for a completed receive: a
// send's status is undefined.
static int brandrt_test(MPI_Request *r, int recv, int *flag, int *src, int *tag, int *n) {
	MPI_Status st;
	int rc = MPI_Test(r, flag, &st);
	if (rc != MPI_SUCCESS || !*flag || !recv) return rc;
	return brandrt_status(&st, src, tag, n);
}
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// mpiError turns an MPI return code into an error naming the call and
// its peer ("collectives: MPI_Isend to rank 2: error code 5"), or nil.
func mpiError(rc C.int, call string, peer ...any) error {
	if rc == C.MPI_SUCCESS {
		return nil
	}
	return fmt.Errorf("collectives: %s: error code %d", fmt.Sprintf(call, peer...), int(rc))
}

// cPtr is the address C sees for s; nil for a nil slice, never &s[0].
func cPtr[T any](s []T) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }

// cInts views s as C ints, which are 32 bits wide wherever cgo runs.
func cInts(s []int32) *C.int { return (*C.int)(cPtr(s)) }

// checkCount refuses buffers whose length a C int cannot carry.
func checkCount(n int, call string) error {
	if n > math.MaxInt32 {
		return fmt.Errorf("collectives: %s of %d bytes: over the 2^31-1 bytes of one MPI message", call, n)
	}
	return nil
}

// allgatherv is MPI_Allgatherv of int32 on MPI_COMM_WORLD: recv gets
// counts[r] elements from rank r at displs[r].
func allgatherv(send, recv, counts, displs []int32) error {
	rc := C.brandrt_allgatherv(cPtr(send), C.int(len(send)), cPtr(recv), cInts(counts), cInts(displs))
	return mpiError(rc, "MPI_Allgatherv of %d elements", len(send))
}

// gatherv is MPI_Gatherv of int32 on MPI_COMM_WORLD to rank root: there
// recv gets counts[r] elements from rank r at displs[r]; elsewhere recv,
// counts and displs are not read.
func gatherv(send, recv, counts, displs []int32, root int) error {
	rc := C.brandrt_gatherv(cPtr(send), C.int(len(send)), cPtr(recv), cInts(counts), cInts(displs), C.int(root))
	return mpiError(rc, "MPI_Gatherv of %d elements to rank %d", len(send), root)
}

// mpiRequest is a nonblocking MPI operation. Its buffer stays pinned, so
// that the garbage collector neither frees nor moves it while MPI holds
// its address, until Test reports completion.
type mpiRequest struct {
	req  C.MPI_Request
	pin  runtime.Pinner
	recv C.int // 1 for a receive, whose status Test reports
	done bool
	st   Status
}

// pinned pins b in r and returns its address for C.
func (r *mpiRequest) pinned(b []byte) unsafe.Pointer {
	if p := unsafe.SliceData(b); p != nil {
		r.pin.Pin(p)
	}
	return cPtr(b)
}

// isend starts MPI_Isend of b to dst, or MPI_Issend with sync.
func isend(b []byte, dst, tag int, sync bool) (*mpiRequest, error) {
	call := "MPI_Isend"
	if sync {
		call = "MPI_Issend"
	}
	if err := checkCount(len(b), call); err != nil {
		return nil, err
	}
	r := &mpiRequest{}
	var rc C.int
	if sync {
		rc = C.brandrt_issend(r.pinned(b), C.int(len(b)), C.int(dst), C.int(tag), &r.req)
	} else {
		rc = C.brandrt_isend(r.pinned(b), C.int(len(b)), C.int(dst), C.int(tag), &r.req)
	}
	if err := mpiError(rc, call+" to rank %d", dst); err != nil {
		r.pin.Unpin()
		return nil, err
	}
	return r, nil
}

// irecv starts MPI_Irecv into b; a negative src or tag (AnySource,
// AnyTag) becomes MPI_ANY_SOURCE or MPI_ANY_TAG.
func irecv(b []byte, src, tag int) (*mpiRequest, error) {
	if err := checkCount(len(b), "MPI_Irecv"); err != nil {
		return nil, err
	}
	r := &mpiRequest{recv: 1}
	rc := C.brandrt_irecv(r.pinned(b), C.int(len(b)), C.int(src), C.int(tag), &r.req)
	if err := mpiError(rc, "MPI_Irecv from rank %d", src); err != nil {
		r.pin.Unpin()
		return nil, err
	}
	return r, nil
}

// Test reports whether the operation completed (MPI_Test), and for a
// receive its source, tag and length. Once done it stays done, and the
// buffer is unpinned.
func (r *mpiRequest) Test() (bool, Status, error) {
	if r.done {
		return true, r.st, nil
	}
	var flag, src, tag, n C.int
	if err := mpiError(C.brandrt_test(&r.req, r.recv, &flag, &src, &tag, &n), "MPI_Test"); err != nil {
		return false, Status{}, err
	}
	if flag == 0 {
		return false, Status{}, nil
	}
	r.done = true
	r.pin.Unpin()
	if r.recv != 0 {
		r.st = Status{Source: int(src), Tag: int(tag), Len: int(n)}
	}
	return true, r.st, nil
}

// iprobe is MPI_Iprobe for any source and tag.
func iprobe() (bool, Status, error) {
	var flag, src, tag, n C.int
	if err := mpiError(C.brandrt_iprobe(&flag, &src, &tag, &n), "MPI_Iprobe"); err != nil {
		return false, Status{}, err
	}
	return flag != 0, Status{Source: int(src), Tag: int(tag), Len: int(n)}, nil
}

// recv is a blocking MPI_Recv into b of a message known to be exactly
// len(b) bytes long.
func recv(b []byte, src, tag int) error {
	if err := checkCount(len(b), "MPI_Recv"); err != nil {
		return err
	}
	var got C.int
	rc := C.brandrt_recv(cPtr(b), C.int(len(b)), C.int(src), C.int(tag), &got)
	if err := mpiError(rc, "MPI_Recv from rank %d", src); err != nil {
		return err
	}
	if int(got) != len(b) {
		return fmt.Errorf("collectives: MPI_Recv from rank %d: got %d bytes, want %d", src, got, len(b))
	}
	return nil
}
