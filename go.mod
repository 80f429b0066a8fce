module github.com/audioproof/audioproof

go 1.26.8
