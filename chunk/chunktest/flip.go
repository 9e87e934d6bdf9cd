package chunktest

import "os"

// FlipByte damages a file on disk: it inverts the byte at off.
func FlipByte(name string, off int64) error {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	b := make([]byte, 1)
	if _, err = f.ReadAt(b, off); err == nil {
		b[0] ^= 0xff
		_, err = f.WriteAt(b, off)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
