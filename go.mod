module github.com/drover-ci/drover

go 1.26.8
