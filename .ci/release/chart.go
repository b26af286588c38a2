package main

import (
	"fmt"
	"io"
)

func chartCmd(root string, args []string, stdout io.Writer) error { return fmt.Errorf("todo") }
