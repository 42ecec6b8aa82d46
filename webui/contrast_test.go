package webui

import (
	"math"
	"regexp"
	"strconv"
	"testing"
)

// The colours of app.css that text is written in, on the backgrounds it is
// written on, meet WCAG AA: a contrast of 4.5:1 or more.
func TestContrast(t *testing.T) {
	t.Parallel()
	css, err := staticFS.ReadFile("static/app.css")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"#fff": "#ffffff"}
	for _, m := range regexp.MustCompile(`(--[a-z-]+):\s*(#[0-9a-f]{6})`).FindAllStringSubmatch(string(css), -1) {
		vars[m[1]] = m[2]
	}
	pairs := [][2]string{
		{"--fg", "--bg"}, {"--fg", "--panel"}, {"--fg", "--grey-bg"}, {"--muted", "--bg"}, {"--muted", "--panel"},
		{"--muted", "--grey-bg"}, {"--link", "--bg"}, {"--link", "--panel"}, {"#fff", "--link"}, {"#fff", "--err"},
		{"--ok", "--ok-bg"}, {"--err", "--err-bg"}, {"--warn", "--warn-bg"}, {"--info", "--info-bg"},
		{"--err", "--bg"}, {"--warn", "--bg"}, {"--fg", "--ok-bg"}, {"--fg", "--err-bg"}, {"--fg", "--warn-bg"},
	}
	for _, p := range pairs {
		fg, bg := vars[p[0]], vars[p[1]]
		if fg == "" || bg == "" {
			t.Fatalf("app.css has no colour %s or %s", p[0], p[1])
		}
		if c := contrast(fg, bg); c < 4.5 {
			t.Errorf("%s (%s) on %s (%s): contrast %.2f, want 4.5 or more", p[0], fg, p[1], bg, c)
		}
	}
}

// contrast is WCAG's contrast ratio of two colours #rrggbb.
func contrast(a, b string) float64 {
	la, lb := luminance(a), luminance(b)
	return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)
}

func luminance(hex string) float64 {
	var rgb [3]float64
	for i := range rgb {
		n, _ := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		c := float64(n) / 255
		if c <= 0.03928 {
			rgb[i] = c / 12.92
		} else {
			rgb[i] = math.Pow((c+0.055)/1.055, 2.4)
		}
	}
	return 0.2126*rgb[0] + 0.7152*rgb[1] + 0.0722*rgb[2]
}
