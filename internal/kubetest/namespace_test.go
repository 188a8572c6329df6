package kubetest

import "testing"

func TestNamePrefix(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"TestFoo", "t-testfoo-"},
		{"TestFoo/sub_test#01", "t-testfoo-sub-test-01-"},
		{"Test__X--", "t-test-x-"},
		{"TestAVeryLongNameThatGoesOnAndOnAndOnAndOnAndOnAndOn", "t-testaverylongnamethatgoesonandonandonandonando-"},
	} {
		if got := namePrefix(tc.in); got != tc.want {
			t.Errorf("namePrefix(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if n := len(namePrefix(tc.in)); n > 63-5 {
			t.Errorf("namePrefix(%q) is %d long, leaves no room for the generated suffix", tc.in, n)
		}
	}
}

func TestLabelValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"TestFoo/sub test", "TestFoo_sub_test"},
		{"_x_", "x"},
	} {
		if got := labelValue(tc.in); got != tc.want {
			t.Errorf("labelValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
