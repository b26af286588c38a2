package mysqlprimary

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Dump command flags.
const (
	dumpNonBlock       = 0x01 // BINLOG_DUMP_NON_BLOCK
	dumpHeartbeatV2    = 0x02 // USE_HEARTBEAT_EVENT_V2
	dumpThroughGTIDSet = 0x04 // BINLOG_THROUGH_GTID (ignored, as MySQL does; but Options.IgnoreSet)
)

type dumpRequest struct {
	gtid     bool
	flags    uint16
	serverID uint32
	file     string
	pos      uint64
	set      *gtidSet
}

func parseDump(cmd byte, data []byte) (dumpRequest, error) {
	var r dumpRequest
	if cmd == mysql.COM_BINLOG_DUMP {
		if len(data) < 10 {
			return r, mysql.ErrMalformPacket
		}
		r.pos = uint64(binary.LittleEndian.Uint32(data))
		r.flags = binary.LittleEndian.Uint16(data[4:])
		r.serverID = binary.LittleEndian.Uint32(data[6:])
		r.file = string(data[10:])
		return r, nil
	}
	r.gtid = true
	if len(data) < 2+4+4 {
		return r, mysql.ErrMalformPacket
	}
	r.flags = binary.LittleEndian.Uint16(data)
	r.serverID = binary.LittleEndian.Uint32(data[2:])
	n := int(binary.LittleEndian.Uint32(data[6:]))
	p := 10
	if len(data) < p+n+8 {
		return r, mysql.ErrMalformPacket
	}
	r.file = string(data[p : p+n])
	p += n
	r.pos = binary.LittleEndian.Uint64(data[p:])
	p += 8
	// MySQL reads the GTID set whatever the flags say (Dolt only with
	// BINLOG_THROUGH_GTID).
	r.set = newGTIDSet()
	if p+4 <= len(data) {
		size := int(binary.LittleEndian.Uint32(data[p:]))
		p += 4
		if len(data) < p+size {
			return r, mysql.ErrMalformPacket
		}
		set, err := mysql.DecodeMysqlGTIDSet(data[p : p+size])
		if err != nil {
			return r, fatal("Malformed GTID set in COM_BINLOG_DUMP_GTID: %v", err)
		}
		r.set = set
	}
	return r, nil
}

// fatal is error 1236 (ER_SOURCE_FATAL_ERROR_READING_BINLOG), the error a
// dump thread ends with.
func fatal(format string, args ...any) error {
	return mysql.NewError(mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, fmt.Sprintf(format, args...))
}

// FailNextDumps makes the next n dump requests fail with error 1236 although
// the server has what they ask for — as Dolt answers a dump that races a
// commit — so tests can show the relay double-checks a "purged" claim.
func (s *Server) FailNextDumps(n int) {
	s.mu.Lock()
	s.failDumps = n
	s.mu.Unlock()
}

// dump serves a binlog dump until the connection is killed or the server
// closes. It writes events as OK packets on the connection; the returned
// error becomes the error packet that ends the stream.
func (s *Server) dump(c *conn, req dumpRequest) error {
	s.mu.Lock()
	if c.replica != nil && c.replica.serverID != req.serverID {
		c.replica.serverID = req.serverID
	}
	// A replica with the same server id replaces the old one's stream.
	for _, o := range s.conns {
		if o != c && o.dumping && o.replica != nil && o.replica.serverID == req.serverID && req.serverID != 0 {
			go o.kill()
		}
	}
	start, err := s.dumpStart(c, req)
	if err == nil && s.failDumps > 0 {
		s.failDumps--
		err = fatal("Cannot replicate because the source purged required binary logs (spurious: FailNextDumps)")
	}
	if err != nil {
		s.mu.Unlock()
		s.logf("dump refused: %v", err)
		return err
	}
	c.dumping = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		c.dumping = false
		s.mu.Unlock()
	}()
	if req.gtid {
		s.logf("COM_BINLOG_DUMP_GTID from server_id %d, excluding %q: from %s", req.serverID, req.set.String(), start.file.name)
	} else {
		s.logf("COM_BINLOG_DUMP from server_id %d at %s:%d", req.serverID, req.file, req.pos)
	}
	err = s.send(c, req, start)
	if err != nil {
		s.logf("dump ended: %v", err)
	}
	return err
}

type dumpStartPoint struct {
	file     *binlogFile
	pos      uint32
	checksum bool          // the replica's @source_binlog_checksum
	period   time.Duration // heartbeat period, 0 for none
}

// dumpStart checks a dump request as MySQL's dump thread does and finds
// where it starts. s.mu is held.
func (s *Server) dumpStart(c *conn, req dumpRequest) (dumpStartPoint, error) {
	var sp dumpStartPoint
	alg, ok := c.vars["source_binlog_checksum"]
	if !ok {
		alg, ok = c.vars["master_binlog_checksum"]
	}
	if !ok {
		return sp, fatal("Replica can not handle replication events with the checksum that source is configured to log; the first event 'binlog.000001' at 4, the last event read from '' at 0, the last byte read from '' at 0.")
	}
	sp.checksum = strings.EqualFold(alg, "CRC32")
	sp.period = s.opts.Heartbeat
	if sp.period == 0 {
		v, ok := c.vars["source_heartbeat_period"]
		if !ok {
			v = c.vars["master_heartbeat_period"]
		}
		ns, _ := strconv.ParseInt(v, 10, 64)
		sp.period = time.Duration(ns)
	}
	if sp.period < 0 {
		sp.period = 0
	}
	if req.gtid {
		if !s.gtidOn() {
			return sp, fatal("Request to dump GTID when @@GLOBAL.GTID_MODE <> ON.")
		}
		// The replica claims GTIDs of this server that it never wrote.
		if mine := restrictTo(req.set, s.uuid); !s.executed.Contain(mine) {
			return sp, fatal("Replica has more GTIDs than the source has, using the source's SERVER_UUID. This may indicate that the end of the binary log was truncated or that the last binary log file was lost, e.g., after a power or disk failure when sync_binlog != 1. The source may or may not have rolled back transactions that were already replicated to the replica. Suggest to replicate any transactions that source has rolled back from replica to source, and/or commit empty transactions on source to account for transactions that have been committed on source but are not included in GTID_EXECUTED.")
		}
		if !req.set.Contain(s.purged) {
			missing := minus(s.purged, req.set)
			return sp, fatal("Cannot replicate because the source purged required binary logs. Replicate the missing transactions from elsewhere, or provision a new replica from backup. Consider increasing the source's binary log expiration period. The GTID set sent by the replica is '%s', and the missing transactions are '%s'", req.set.String(), missing.String())
		}
		// The newest file whose Previous_gtids the replica has.
		sp.file = s.files[0]
		for i := len(s.files) - 1; i >= 0; i-- {
			if req.set.Contain(s.files[i].previous) {
				sp.file = s.files[i]
				break
			}
		}
		sp.pos = 4
		return sp, nil
	}
	i := s.fileIndex(req.file)
	if req.file == "" {
		i = 0
	}
	if i < 0 {
		return sp, fatal("Could not find first log file name in binary log index file")
	}
	if req.pos < 4 {
		return sp, fatal("Client requested source to start replication from position < 4.")
	}
	f := s.files[i]
	if req.pos > uint64(f.size) {
		return sp, fatal("Client requested source to start replication from position > file size")
	}
	sp.file, sp.pos = f, uint32(req.pos)
	return sp, nil
}

// send streams from sp: for each file a fake ROTATE, its FORMAT_DESCRIPTION,
// then its events from the start position, skipping the transactions the
// replica has (a heartbeat after each skipped run, as MySQL sends), waiting at
// the end of the active file with heartbeats.
func (s *Server) send(c *conn, req dumpRequest, sp dumpStartPoint) error {
	checksum := sp.checksum // until the first FORMAT_DESCRIPTION: the replica's choice
	f, pos := sp.file, sp.pos
	hbV2 := req.flags&dumpHeartbeatV2 != 0
	heartbeat := func(file string, at uint32) error {
		if hbV2 {
			return c.write(event{typ: evHeartbeatV2, serverID: s.opts.ServerID, body: heartbeatV2Body(file, uint64(at))}.encode(at, checksum))
		}
		return c.write(event{typ: evHeartbeat, serverID: s.opts.ServerID, body: []byte(file)}.encode(at, checksum))
	}
	for {
		// Fake rotate: timestamp 0, log_pos 0, artificial.
		if err := c.write(event{typ: evRotate, serverID: s.opts.ServerID, flags: flagArtificial, body: rotateBody(uint64(pos), f.name)}.encode(0, checksum)); err != nil {
			return err
		}
		s.mu.Lock()
		fde := f.events[0]
		firstSkipped := req.gtid && f.firstGTID != nil && !f.firstGTID.anonymous && containsGTID(req.set, f.firstGTID.sid, f.firstGTID.tag, f.firstGTID.gno)
		s.mu.Unlock()
		data := append([]byte(nil), fde.data...)
		if pos > 4 || firstSkipped {
			// log_pos and the created timestamp cleared, checksum redone.
			binary.LittleEndian.PutUint32(data[13:], 0)
			binary.LittleEndian.PutUint32(data[headerLen+2+50:], 0)
			binary.LittleEndian.PutUint32(data[len(data)-4:], crc32IEEE(data[:len(data)-4]))
		}
		if err := c.write(data); err != nil {
			return err
		}
		checksum = true // the file's FORMAT_DESCRIPTION announces CRC32
		idx := 1
		if pos > 4 {
			idx = -1
			s.mu.Lock()
			for i, e := range f.events {
				if e.pos == pos {
					idx = i
					break
				}
			}
			s.mu.Unlock()
			if idx < 0 {
				return fatal("log event entry exceeded max_allowed_packet; Increase max_allowed_packet on source; the first event '%s' at %d, the last event read from '%s' at %d, the last byte read from '%s' at %d.", f.name, pos, f.name, 4, f.name, pos)
			}
		}
		inExcluded := false
		var skippedTo uint32
		for {
			s.mu.Lock()
			evs := f.events[idx:]
			rotated := f.rotated
			changed := s.changed
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return fatal("the source is shutting down")
			}
			for _, e := range evs {
				idx++
				end := e.pos + uint32(len(e.data))
				if req.gtid {
					switch {
					case e.gtid != nil:
						inExcluded = !e.gtid.anonymous && containsGTID(req.set, e.gtid.sid, e.gtid.tag, e.gtid.gno)
					case e.typ == evRotate:
						inExcluded = false
					}
					if inExcluded {
						skippedTo = end
						continue
					}
				}
				if skippedTo != 0 {
					if err := heartbeat(f.name, skippedTo); err != nil {
						return err
					}
					skippedTo = 0
				}
				if err := c.write(e.data); err != nil {
					return err
				}
			}
			if skippedTo != 0 {
				if err := heartbeat(f.name, skippedTo); err != nil {
					return err
				}
				skippedTo = 0
			}
			if len(evs) > 0 {
				continue
			}
			if rotated {
				break
			}
			if req.flags&dumpNonBlock != 0 {
				return c.writeEOF()
			}
			if err := s.wait(c, changed, sp.period, func() error {
				s.mu.Lock()
				at := f.size
				s.mu.Unlock()
				return heartbeat(f.name, at)
			}); err != nil {
				return err
			}
		}
		s.mu.Lock()
		i := s.fileIndex(f.name)
		var next *binlogFile
		if i >= 0 && i+1 < len(s.files) {
			next = s.files[i+1]
		}
		s.mu.Unlock()
		if next == nil {
			return fatal("could not find next log; the first event '%s' at 4, the last event read from '%s' at %d, the last byte read from '%s' at %d.", f.name, f.name, f.size, f.name, f.size)
		}
		f, pos = next, 4
	}
}

// wait blocks until the binlog changes, sending a heartbeat when the period
// passes first.
func (s *Server) wait(c *conn, changed <-chan struct{}, period time.Duration, heartbeat func() error) error {
	var tick <-chan time.Time
	if period > 0 {
		tm := time.NewTimer(period)
		defer tm.Stop()
		tick = tm.C
	}
	select {
	case <-changed:
		return nil
	case <-c.done:
		return fatal("connection killed")
	case <-tick:
		return heartbeat()
	}
}

// write sends one event as the replication protocol does: an OK byte, then
// the event.
func (c *conn) write(ev []byte) error {
	data := make([]byte, 4, 5+len(ev))
	data = append(data, mysql.OK_HEADER)
	data = append(data, ev...)
	return c.c.WritePacket(data)
}

func (c *conn) writeEOF() error {
	return c.c.WritePacket([]byte{0, 0, 0, 0, mysql.EOF_HEADER, 0, 0, 0, 0})
}
