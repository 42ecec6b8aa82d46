package redact

import "testing"

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"postgres://app:hunter2@db:5432/app?sslmode=disable", "postgres://app:xxxxx@db:5432/app?sslmode=disable"},
		{"postgresql://app:p%40ss@db/app", "postgresql://app:xxxxx@db/app"},
		{"postgres://app:p@ss@db/app", "postgres://app:xxxxx@db/app"},
		{"postgres://app@db/app", "postgres://app@db/app"},
		{"postgres://db/app?user=app&password=hunter2&sslmode=require", "postgres://db/app?user=app&password=xxxxx&sslmode=require"},
		{"postgres://db/app?sslpassword=hunter2", "postgres://db/app?sslpassword=xxxxx"},
		{"host=db user=app password=hunter2 dbname=app", "host=db user=app password=xxxxx dbname=app"},
		{"host=db password='hun ter2' dbname=app", "host=db password=xxxxx dbname=app"},
		{"host=db PASSWORD = hunter2", "host=db PASSWORD = xxxxx"},
		{"https://user:secret@example.com/x", "https://xxxxx@example.com/x"},
		{"https://ghp_abc123@github.com/o/r", "https://xxxxx@github.com/o/r"},
		{"https://hooks.example/x?token=abc&n=1", "https://hooks.example/x?token=xxxxx&n=1"},
		{"https://s3.example/o?X-Amz-Signature=abc&api_key=k1&access_token=t1", "https://s3.example/o?X-Amz-Signature=xxxxx&api_key=xxxxx&access_token=xxxxx"},
		{"listening on http://127.0.0.1:7420 (database postgres://u:pw@h/db)", "listening on http://127.0.0.1:7420 (database postgres://u:xxxxx@h/db)"},
		{"reprise.db", "reprise.db"},
		{"sqlite:/var/lib/reprise/reprise.db", "sqlite:/var/lib/reprise/reprise.db"},
		{"run order-42 failed: step charge: HTTP 503", "run order-42 failed: step charge: HTTP 503"},
	} {
		if got := String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
