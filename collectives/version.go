package collectives

/*
#cgo pkg-config: ompi
#include <mpi.h>

static int brandrt_library_version(char *buf, int *len) {
	return MPI_Get_library_version(buf, len);
}
*/
import "C"

import (
	"strings"
	"unsafe"
)

// LibraryVersion returns the MPI library's version string (what
// MPI_Get_library_version reports, first line only). It may be called
// before Init.
func LibraryVersion() string {
	buf := make([]byte, C.MPI_MAX_LIBRARY_VERSION_STRING)
	var n C.int
	if C.brandrt_library_version((*C.char)(unsafe.Pointer(&buf[0])), &n) != C.MPI_SUCCESS {
		return "unknown"
	}
	s, _, _ := strings.Cut(string(buf[:n]), "\n")
	return strings.TrimRight(s, "\x00, ")
}
