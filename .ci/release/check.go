package main

import (
	"fmt"
	"io"
)

func checkCmd(root string, args []string, stdout io.Writer) error { return fmt.Errorf("todo") }
