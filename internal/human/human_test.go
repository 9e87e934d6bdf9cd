package human

import "testing"

func TestFormats(t *testing.T) {
	half := 0.5
	for _, c := range []struct{ got, want string }{
		{IBytes(1536), "1.5 KiB"}, {IBytes(-3), "0 B"}, {Comma(1281167), "1,281,167"},
		{Seconds(0.00085), "850 µs"}, {Seconds(0.012), "12 ms"}, {Seconds(1.25), "1.25 s"},
		{Plural(1, "file"), "1 file"}, {Plural(1200, "file"), "1,200 files"}, {Plural(0, "file"), "0 files"},
		{Percent(&half), "50.000%"}, {Percent(nil), "-"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
