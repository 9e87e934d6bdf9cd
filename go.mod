module github.com/brandrt/brandrt

go 1.27

toolchain go1.27.1

require (
	github.com/dustin/go-humanize v1.1.0
	github.com/klauspost/cpuid/v2 v2.4.2
	github.com/sbromberger/gompi v0.3.0
	github.com/urfave/cli/v2 v2.27.7
	golang.org/x/sys v0.41.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
)
